%% @doc EUnit entry points of the simulator's CRDT-table family ({@link hm_sim_crdt_table},
%% run by {@link hm_sim} with option `crdt').
%%
%% <ul>
%% <li>`seeds_test_': for every type x flavor, a fixed set of seeds (20 each,
%% `HM_SIM_CRDT_TABLE_SEEDS' overrides) with loss, duplication, reordering, partitions,
%% crashes and restarts, and copies added and removed. All must pass
%% every checker.</li>
%% <li>`partitioned_test_': partitioned CRDT tables ({@link hm_sim_frag} with option `crdt'):
%% fragments on a ring, updates from any node, passed on or kept as hints, nodes leaving and
%% rejoining the pool, partitions, loss and duplication; every type x flavor, 5 seeds each.</li>
%% <li>`leaving_copy_keeps_its_unsent_batch_test': a copy leaving the pool is removable only
%% with no unsent update ({@link hm_partition:removable/3}); removed once the others hold
%% every operation it broadcast, the updates it took that still wait in its epoch's batch
%% would be lost.</li>
%% <li>`checkers_see_*_test': copies that never exchanged their updates must be reported as
%% diverged, with acknowledged updates lost and values off the specification; the same
%% copies once every update is delivered must pass.</li>
%% </ul>
-module(hm_sim_crdt_table_tests).
-include_lib("eunit/include/eunit.hrl").

seeds() ->
    case os:getenv("HM_SIM_CRDT_TABLE_SEEDS") of
        V when V =:= false; V =:= "" -> 20;
        V -> list_to_integer(V)
    end.

seeds_test_() ->
    N = seeds(),
    {Tests, _} =
        lists:mapfoldl(
          fun(Spec = {T, F}, From) ->
                  Name = lists:flatten(io_lib:format("CRDT table ~p ~p", [T, F])),
                  {{Name, {timeout, 60,
                           ?_test(begin
                                      {P, Fl, Tot, Bad} =
                                          hm_sim:check_seeds({From, N},
                                                             #{crdt => true, crdt_spec => Spec}),
                                      io:format(user, "~nsim ~s: ~p passed, ~p failed (~p "
                                                "updates, ~p crashes, ~p lost with a ram "
                                                "crash)~n",
                                                [Name, P, Fl, maps:get(ops, Tot, 0),
                                                 maps:get(crashes, Tot, 0),
                                                 maps:get(lost_with_ram_crash, Tot, 0)]),
                                      ?assertEqual(N, P + Fl),
                                      ?assert(maps:get(ops, Tot, 0) > 0),
                                      ?assertEqual([], [{S, maps:get(failures, R)}
                                                        || {S, R} <- Bad])
                                  end)}}, From + 1000}
          end, 1, hm_sim_crdt_table:combos()),
    Tests.

partitioned_test_() ->
    {Tests, _} =
        lists:mapfoldl(
          fun(Spec, From) ->
                  Name = lists:flatten(io_lib:format("partitioned CRDT table ~p ~p",
                                                     tuple_to_list(Spec))),
                  {{Name, {timeout, 60,
                           ?_test(begin
                                      {P, _, Tot, Bad} =
                                          hm_sim_frag:check_seeds({From, 5},
                                                                  #{crdt => Spec,
                                                                    epoch => 100}),
                                      ?assertEqual(5, P),
                                      ?assert(maps:get(ops, Tot, 0) > 0),
                                      ?assertEqual([], [{S, maps:get(failures, R)}
                                                        || {S, R} <- Bad])
                                  end)}}, From + 100}
          end, 1, hm_sim_crdt_table:combos()),
    Tests.

%% A leaving copy is removed only once its epoch's batch is sent: seed 2, awset state tables
%% with a long epoch, removes copies and passes every checker.
leaving_copy_keeps_its_unsent_batch_test() ->
    ?assertMatch(#{ok := true, stats := #{copies_removed := N}} when N > 0,
                 hm_sim_frag:run_seed(2, #{crdt => {awset, state}, epoch => 900})).

%% the same seed gives the same run
deterministic_test() ->
    [?assertEqual(hm_sim:run_seed(S, #{crdt => true}), hm_sim:run_seed(S, #{crdt => true}))
     || S <- [3, 4]].

%%% ------------------------------------------------------------ the checkers can fail

%% two copies of a pncounter table, one update each, never exchanged
apart(Flavor) ->
    Cfg = #{crdt => {pncounter, Flavor}, epoch => 100, n => 2},
    S0 = #{cfg => Cfg, nodes => [n1, n2], reps => #{}, now => 0, stats => #{},
           failures => [], quiesced_ms => 0, groups => all, inc => #{n1 => 1, n2 => 1}},
    Reps = maps:from_list([{Nd, element(1, copy(Nd, Cfg))} || Nd <- [n1, n2]]),
    lists:foldl(fun({Nd, Op}, S = #{reps := Rs}) ->
                        {R1, _, S1} = hm_sim_crdt_table:update(Nd, k1, Op, maps:get(Nd, Rs),
                                                               S#{groups := [[n1], [n2]]}),
                        S1#{reps := Rs#{Nd := R1}}
                end, S0#{reps := Reps}, [{n1, {increment, 2}}, {n2, {decrement, 5}}]).

copy(Nd, Cfg) ->
    %% both members, each alone (a brand-new table: every copy starts ready)
    {R, _} = hm_ec_table:new(maps:merge(#{tab => sim, type => pawset, policy => term_order,
                                          record => {r, 3}, cookie => sim, node => Nd,
                                          incarnation => 1, members => [Nd], events => true,
                                          store => hm_ec_store_map:new(set, ram)},
                                        hm_sim_crdt_table:replica_opts(Cfg))),
    {R, []}.

kinds(#{failures := Fs}) -> lists:usort([element(1, F) || {_, F} <- Fs]).

checkers_see_divergence_test_() ->
    [?_test(begin
                S = apart(F),
                ?assertNot(hm_sim_crdt_table:converged(S)),
                Res = hm_sim_crdt_table:finish(S),
                ?assertNot(maps:get(ok, Res)),
                Kinds = kinds(Res),
                ?assert(lists:member(diverged, Kinds)),
                ?assert(lists:member(acknowledged_update_lost, Kinds)),
                ?assert(lists:member(value_not_spec, Kinds))
            end) || F <- [op, state, delta]].

%% a copy that lost an update nobody else holds passes only when the update is marked lost,
%% and the counter bound still holds
checkers_see_lost_update_test() ->
    S = apart(delta),
    #{reps := #{n1 := R1}} = S,
    %% n2 went away with its update: only n1 is left
    S1 = hm_sim_crdt_table:mark_lost(S#{nodes := [n1], reps := #{n1 => R1, n2 => out}}),
    Lost = [I || I = #{lost := true} <- maps:values(maps:get(updates, S1))],
    ?assertMatch([#{op := {decrement, 5}}], Lost),
    ?assertMatch(#{ok := false}, hm_sim_crdt_table:finish(S1)),   % n1's batch is unsent
    {R2, _} = hm_ec_table:timeout(crdt_epoch, R1),
    {R3, _} = hm_ec_table:tick([], R2),
    ?assertMatch(#{ok := true}, hm_sim_crdt_table:finish(S1#{reps := #{n1 => R3}})).
