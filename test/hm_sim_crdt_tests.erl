%% @doc EUnit entry points of the CRDT workloads of the simulator ({@link hm_sim_crdt}; the
%% Hypermnesia paper, §4.3–4.8, and the ChiaVe paper, §3–4).
%%
%% <ul>
%% <li>`seeds_test_': for every type x flavor (21), 100 seeds (`HM_SIM_CRDT_SEEDS' overrides)
%% with every fault (drop, duplicate, delay/reorder, the four partition shapes, crashes and
%% restarts; ram or disc per seed, op always disc; delta both ways, 100 seeds each). All
%% must pass every checker.</li>
%% <li>`checker*_test': each checker fed a deliberately wrong replica result must report it
%% (so a broken checker fails here), and the right result must pass.</li>
%% <li>`*_trace_test': hand-written schedules of the conflicts the specs are about.</li>
%% <li>`delta_of_a_superseded_replica_leaves_the_buffer_test': a buffered delta of a replica id
%% superseded by a restart is dropped, not kept pending and handed on.</li>
%% </ul>
-module(hm_sim_crdt_tests).
-include_lib("eunit/include/eunit.hrl").

seeds() ->
    case os:getenv("HM_SIM_CRDT_SEEDS") of
        V when V =:= false; V =:= "" -> 100;
        V -> list_to_integer(V)
    end.

seeds_test_() ->
    N = seeds(),
    Regimes = [{T, F, #{}} || {T, F} <- hm_sim_crdt:combos(), F =/= delta]
        ++ [{T, delta, #{storage => St}} || T <- types(), St <- [disc, ram]],
    {Tests, _} = lists:mapfoldl(fun(Regime, From) -> {regime(Regime, From, N), From + 1000} end,
                                1, Regimes),
    Tests.

types() -> lists:usort([T || {T, _} <- hm_sim_crdt:combos()]).

regime({T, F, Opts}, From, N) ->
    Name = lists:flatten(io_lib:format("~p ~p ~p", [T, F, maps:get(storage, Opts, any)])),
    {Name, {timeout, 60,
            ?_test(begin
                       {P, Fl, Tot, Bad} =
                           hm_sim_crdt:check_seeds({From, N}, Opts#{type => T, flavor => F}),
                       io:format(user, "~nsim crdt ~s: ~p passed, ~p failed "
                                 "(~p ops, ~p messages, ~p dropped, ~p crashes,"
                                 " ~p lost with a ram crash)~n",
                                 [Name, P, Fl, maps:get(ops, Tot, 0),
                                  maps:get(msgs, Tot, 0), maps:get(dropped, Tot, 0),
                                  maps:get(crashes, Tot, 0),
                                  maps:get(lost_with_ram_crash, Tot, 0)]),
                       ?assertEqual([], [{S, maps:get(failures, R)} || {S, R} <- Bad])
                   end)}}.

%% the same seed gives the same run
deterministic_test() ->
    [?assertEqual(hm_sim_crdt:run_seed(S, #{}), hm_sim_crdt:run_seed(S, #{}))
     || S <- [5, 6, 7]].

%%% ------------------------------------------------------------ checkers 1, 2, 5: check/2

-define(A, {n1, 1}).
-define(B, {n2, 1}).

%% an op at replica Id, its dot's counter Seq, with the vector timestamp Ts (itself included)
op(Id, Seq, Op, Ts) -> {{Id, Seq}, #{dot => {Id, Seq}, origin => Id, op => Op, ts => Ts,
                                     lost => false}}.

summary(Values, Delivered, Ops) ->
    #{values => Values, delivered => Delivered, ops => maps:from_list(Ops),
      leftovers => [{N, #{}} || {N, _} <- Values]}.

both(V) -> [{n1, V}, {n2, V}].

kinds(Fs) -> lists:usort([element(1, F) || F <- Fs]).

%% two concurrent ops: n1 adds a, n2 removes a
conflict() ->
    [op(?A, 1, {add, a}, #{?A => 1}), op(?B, 1, {remove, a}, #{?B => 1})].

checker1_convergence_test() ->
    Ops = [op(?A, 1, increment, #{?A => 1})],
    D = #{?A => 1},
    ?assertEqual([], hm_sim_crdt:check(#{type => gcounter, flavor => state},
                                       summary([{n1, 1}, {n2, 1}], [{n1, D}, {n2, D}], Ops))),
    %% same value, different delivered vectors: diverged too
    Fs = hm_sim_crdt:check(#{type => gcounter, flavor => state},
                           summary([{n1, 1}, {n2, 1}], [{n1, D}, {n2, D#{?B => 1}}], Ops)),
    ?assert(lists:member(diverged, kinds(Fs))),
    Fs2 = hm_sim_crdt:check(#{type => gcounter, flavor => state},
                            summary([{n1, 1}, {n2, 0}], [{n1, D}, {n2, D}], Ops)),
    ?assert(lists:member(diverged, kinds(Fs2))).

checker2_lost_op_test() ->
    Ops = [op(?A, 1, increment, #{?A => 1}), op(?A, 2, increment, #{?A => 2})],
    D = #{?A => 1},
    Fs = hm_sim_crdt:check(#{type => gcounter, flavor => op},
                           summary([{n1, 1}, {n2, 1}], [{n1, D}, {n2, D}], Ops)),
    ?assertEqual([acknowledged_op_lost, counter_out_of_bounds], kinds(Fs)),
    %% lost with a ram crash: allowed
    [{_, I1}, {Dot2, I2}] = Ops,
    Ops2 = [{{?A, 1}, I1}, {Dot2, I2#{lost := true}}],
    ?assertEqual([], hm_sim_crdt:check(#{type => gcounter, flavor => op},
                                       summary([{n1, 1}, {n2, 1}], [{n1, D}, {n2, D}], Ops2))).

checker2_sets_test() ->
    D = #{?A => 1, ?B => 1},
    Check = fun(Type, V) -> kinds(hm_sim_crdt:check(#{type => Type, flavor => delta},
                                                    summary([{n1, V}, {n2, V}],
                                                            [{n1, D}, {n2, D}], conflict())))
            end,
    %% add-wins keeps a concurrent add, remove-wins drops it
    ?assertEqual([], Check(awset, [a])),
    ?assertEqual([value_not_spec], Check(awset, [])),
    ?assertEqual([], Check(rwset, [])),
    ?assertEqual([value_not_spec], Check(rwset, [a])),
    %% a remove that causally follows the add removes it in both
    Seq = [op(?A, 1, {add, a}, #{?A => 1}), op(?B, 1, {remove, a}, #{?A => 1, ?B => 1})],
    ?assertEqual([value_not_spec],
                 kinds(hm_sim_crdt:check(#{type => awset, flavor => op},
                                         summary([{n1, [a]}, {n2, [a]}], both(D), Seq)))).

checker2_registers_test() ->
    D = #{?A => 1, ?B => 1},
    Conc = [op(?A, 1, {assign, x}, #{?A => 1}), op(?B, 1, {assign, y}, #{?B => 1})],
    ?assertEqual([], hm_sim_crdt:check(#{type => mvreg, flavor => op},
                                       summary([{n1, [x, y]}, {n2, [x, y]}], both(D), Conc))),
    ?assertEqual([value_not_spec],
                 kinds(hm_sim_crdt:check(#{type => mvreg, flavor => op},
                                         summary([{n1, [y]}, {n2, [y]}], both(D), Conc)))),
    %% lww: the greatest {Ts, Replica}, even against causality
    Lww = [op(?A, 1, {assign, x, 7}, #{?A => 1}), op(?B, 1, {assign, y, 5}, #{?A => 1, ?B => 1})],
    ?assertEqual([], hm_sim_crdt:check(#{type => lwwreg, flavor => state},
                                       summary([{n1, x}, {n2, x}], both(D), Lww))),
    ?assertEqual([value_not_spec],
                 kinds(hm_sim_crdt:check(#{type => lwwreg, flavor => state},
                                         summary([{n1, y}, {n2, y}], both(D), Lww)))).

checker2_counter_bounds_test() ->
    %% Maelstrom's bound: acknowledged 2, a lost decrement of 3: value in [-1, 2]
    Ops = [op(?A, 1, {increment, 2}, #{?A => 1}),
           {{?B, 1}, #{dot => {?B, 1}, origin => ?B, op => {decrement, 3}, ts => #{?B => 1},
                       lost => true}}],
    D = #{?A => 1},
    ?assertEqual([], hm_sim_crdt:check(#{type => pncounter, flavor => state},
                                       summary([{n1, 2}, {n2, 2}], [{n1, D}, {n2, D}], Ops))),
    Fs = hm_sim_crdt:check(#{type => pncounter, flavor => state},
                           summary([{n1, 3}, {n2, 3}], [{n1, D}, {n2, D}], Ops)),
    ?assertEqual([counter_out_of_bounds, value_not_spec], kinds(Fs)).

checker5_metadata_test() ->
    Ops = [op(?A, 1, enable, #{?A => 1})],
    D = #{?A => 1},
    S = (summary([{n1, true}, {n2, true}], [{n1, D}, {n2, D}], Ops))#{
          leftovers := [{n1, #{crdt_metadata => 0, log => 0}},
                        {n2, #{crdt_metadata => 1, log => 0}}]},
    ?assertEqual([metadata_left], kinds(hm_sim_crdt:check(#{type => ewflag, flavor => op}, S))),
    %% the state flavor has no stability: its dots stay
    ?assertEqual([], hm_sim_crdt:check(#{type => ewflag, flavor => state}, S)).

%%% ------------------------------------------------------------ checkers 3, 4: online

online(Applied) ->
    #{nodes => [n1, n2], reps => #{n1 => #{status => ready}, n2 => #{status => ready}},
      applied => Applied, ops => #{}, failures => [], now => 0, stats => #{}}.

checker3_causal_delivery_test() ->
    S = online(#{n1 => #{}, n2 => #{}}),
    Ok = hm_sim_engine:events(n2, [{applied, {?A, #{?A => 1}, x}},
                                   {applied, {?A, #{?A => 2}, y}}], S),
    ?assertEqual([], maps:get(failures, Ok)),
    %% the second op of n1 before the first, or an op before one its timestamp has seen
    Gap = hm_sim_engine:events(n2, [{applied, {?A, #{?A => 2}, y}}], S),
    ?assertMatch([{_, {causal_delivery, n2, _, _, _}}], maps:get(failures, Gap)),
    Dep = hm_sim_engine:events(n2, [{applied, {?B, #{?A => 1, ?B => 1}, y}}], S),
    ?assertMatch([{_, {causal_delivery, n2, _, _, _}}], maps:get(failures, Dep)).

checker4_stability_test() ->
    Safe = hm_sim_engine:events(n1, [{stabilized, [{?A, 1}]}], online(#{n1 => #{?A => 1},
                                                                   n2 => #{?A => 1}})),
    ?assertEqual([], maps:get(failures, Safe)),
    Unsafe = hm_sim_engine:events(n1, [{stabilized, [{?A, 1}]}], online(#{n1 => #{?A => 1},
                                                                     n2 => #{}})),
    ?assertMatch([{_, {unsafe_stability, n1, _}}], maps:get(failures, Unsafe)).

%%% ------------------------------------------------------------ targeted traces

cfg(Type, Flavor, Storage) ->
    #{kind => crdt, n => 3, type => Type, flavor => Flavor, storage => Storage, drop => 0.0,
      dup => 0.0, delay => 10, duration => 4000, seed => 1,
      skew => #{n1 => 0, n2 => 0, n3 => 0}}.

%% n1 and n2 on either side of a partition: n1 adds a twice and removes b, n2 removes a and
%% adds b; after the heal add-wins shows [a, b], remove-wins []. Every flavor.
set_conflict_trace_test_() ->
    Trace = [{50, {op, n3, {add, b}}},
             {100, {partition, halves, [[n1], [n2, n3]]}},
             {200, {op, n1, {add, a}}}, {210, {op, n2, {remove, a}}},
             {300, {op, n1, {remove, b}}}, {310, {op, n2, {add, b}}},
             {1000, heal}],
    [{atom_to_list(T) ++ " " ++ atom_to_list(F),
      ?_test(begin
                 R = hm_sim_crdt:run(cfg(T, F, disc), Trace),
                 ?assertEqual([], maps:get(failures, R)),
                 ?assertEqual(5, maps:get(ops, maps:get(stats, R))),
                 ?assertEqual(case T of awset -> [a, b]; rwset -> [] end,
                              maps:get(value, maps:get(stats, R)))
             end)} || T <- [awset, rwset], F <- [op, state, delta]].

%% a crash and restart of the op replica that issued an op still in flight (disc: it
%% survives), and a ram state replica whose only op is lost with it (allowed)
crash_trace_test() ->
    R1 = hm_sim_crdt:run(cfg(pncounter, op, disc),
                         [{100, {partition, isolated, [[n1], [n2, n3]]}},
                          {200, {op, n1, {increment, 2}}}, {300, {crash, n1}},
                          {400, heal}, {500, {restart, n1}}, {600, {op, n2, decrement}}]),
    ?assertEqual([], maps:get(failures, R1)),
    R2 = hm_sim_crdt:run(cfg(gcounter, state, ram),
                         [{100, {partition, isolated, [[n1], [n2, n3]]}},
                          {200, {op, n1, increment}}, {300, {crash, n1}}, {400, heal},
                          {500, {restart, n1}}, {600, {op, n2, increment}}]),
    ?assertEqual([], maps:get(failures, R2)),
    ?assertEqual(1, maps:get(lost_with_ram_crash, maps:get(stats, R2))).

%%% ------------------------------------------------------------ crashes and restarts

%% A replica drops buffered deltas of a superseded replica id (hm_crdt:drop_pending/2).
%% Delta flavor, ram replicas: n1 mutates twice and crashes; its second delta reaches n2/n3,
%% its first (and its full state) does not. Both ops are lost with the ram crash (allowed).
%% Kept, the second delta would wait in hm_crdt's causal buffer forever (its predecessor
%% never comes), and merge/2 would hand it on to every replica, even n1's new incarnation.
delta_of_a_superseded_replica_leaves_the_buffer_test() ->
    Cfg = (cfg(ewflag, delta, ram))#{delay => 100, seed => 7},
    Trace = [{100, {op, n1, enable}}, {101, {op, n1, disable}}, {150, {crash, n1}},
             {1000, {restart, n1}}],
    R = hm_sim_crdt:run(Cfg, Trace),
    ?assertEqual(2, maps:get(lost_with_ram_crash, maps:get(stats, R))),
    ?assertEqual([], maps:get(failures, R)).
