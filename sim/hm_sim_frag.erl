%% @doc Deterministic simulator of partitioned EC tables: a table in `F' fragments on a
%% consistent-hash ring of a pool of nodes ({@link hm_ring}), each fragment held by the `N'
%% nodes of its preference list, each copy the runtime's own per-table core
%% ({@link hm_ec_table} on a map store), over the network, fault model and scheduler of
%% {@link hm_sim} (this module is its `driver').
%%
%% What runs here is what the runtime runs: the key's fragment ({@link hm_ec_frag:fragment/2}),
%% the order in which a node without a copy tries the holders
%% ({@link hm_ec_frag:holder_order/3}), the hints and their hand-off order
%% ({@link hm_ec_hints:pass_on/4}: a write with no reachable holder is kept, and older hints
%% of its fragment leave first), the placement and the moves of a pool change
%% ({@link hm_ring:placement/3}, {@link hm_ring:moves/2}), the plan of each fragment's move
%% ({@link hm_frag_move:plan/3}), and the condition for removing a copy that leaves
%% ({@link hm_partition:removable/3}). A move adds the new copies (empty,
%% syncing: they catch up by state transfer), and removes a leaving copy only once the new
%% ones are ready and the others hold every operation it originated, as
%% `hypermnesia:change_table_frag/2' does; like Mnesia, it waits while the fragment's holders
%% cannot all talk.
%%
%% A schedule: 4–6 nodes, 3–8 fragments, 2–3 copies, client writes, deletes and
%% delete_objects on 6 keys from any node (a holder of the key's fragment or not), partitions
%% (halves, isolated, bridge, flapping), message loss, duplication and reordering, and one or
%% two pool changes (a node leaves the pool, and may come back). After the work phase: heal,
%% finish the moves, hand off the hints, run until quiescent, check.
%%
%% With option `crdt => {Type, Flavor}' (and `epoch'; `crdt => any': the seed picks them)
%% the table is a CRDT table: client
%% updates of the type instead of writes, the broadcast epoch's timers, and the checkers of
%% {@link hm_sim_crdt_table} per key on every holder of its fragment (the type's spec, the
%% counter bound) on top of these.
%%
%% A table of records (not a CRDT table; option `crash => false' turns this off) also has
%% crashes: those of the shared fault model and, in 3 seeds of 4, of the first node to hold
%% hints from a random time on. A crash breaks the node's links and drops its ram copies,
%% its hints and its sessions (all kept in memory); a restart brings an empty new
%% incarnation of each copy it still holds. In 1 seed of 4 of these, the node that would
%% leave the pool dies for good instead (it never restarts) and, while it is down, leaves
%% the pool (`{pool, del, Node}'), as `hypermnesia:change_table_frag(Tab, {del_node, Node})'
%% makes a node that is down leave: its copies are dropped without handing anything over and
%% each fragment it held gets a new copy on a survivor, which catches up from the copies
%% that are up. That seed has no other pool change. Counted: `dead_nodes',
%% `dead_nodes_removed', `copies_of_dead_nodes_removed'.
%%
%% Checkers: (1) every fragment's holders converge (same rows, same delivered vector); (2) no
%% lost acknowledged write: every write a node applied or passed on, and every hint it kept,
%% is delivered by every holder of its fragment at the end (so no hint is left), except a
%% hint held by a node that crashed, and a write no other copy had delivered when the copy
%% that took it crashed: those are counted as lost with the crash; (3) the placement is the
%% ring's for the final pool; (4) every fragment has its `N' copies (or all the pool), each
%% ready on a node that is up (a dead node's copies were re-created on the survivors), all
%% equal by (1), and no node outside the pool holds one; (5) session order: each operation
%% a node issues on a key is causally after the one it issued before on that key, wherever
%% each was applied (see {@link hm_ec_hints}; per node incarnation, and not after a write
%% whose copy crashed).
%%
%% The family's modules: this one runs a schedule and is the driver the engine calls (ticks,
%% deliveries, trace actions) and holds the copies; {@link hm_sim_frag_gen} makes the
%% schedules, {@link hm_sim_frag_writes} the client operations, the pass-on and the hints,
%% {@link hm_sim_frag_churn} the crashes, restarts and pool changes (the moves of
%% fragments), and {@link hm_sim_frag_check} the checkers.
-module(hm_sim_frag).

-export([gen/2, run/2, run_seed/2, check_seeds/2]).
-export([event/2, nodeup/3, action/2, converged/1, quiescent/1]).
%% the copies, for the family's modules
-export([new_copy/4, copy/3, put_copy/4, effects/4, reachable/2]).

%% a copy's tick: the runtime's schedule
-define(TICK, hm_ec_table_schedule:tick_ms()).

%% @doc The configuration and trace of seed `Seed' ({@link hm_sim_frag_gen:gen/2}).
-spec gen(integer(), map()) -> {map(), [hm_sim:action()]}.
gen(Seed, Opts) -> hm_sim_frag_gen:gen(Seed, Opts).

%%% ================================================================ running

-spec run_seed(integer(), map()) -> hm_sim:result().
run_seed(Seed, Opts) ->
    {Cfg, Trace} = hm_sim_frag_gen:gen(Seed, Opts),
    run(Cfg, Trace).

%% @doc Run a configuration and trace to quiescence, then check.
-spec run(map(), [hm_sim:action()]) -> hm_sim:result().
run(Cfg = #{n := N, seed := Seed, fragments := F, copies := Copies},
    Trace) ->
    Nodes = hm_sim:nodes_of(N),
    Placement = hm_ring:placement(hm_ring:new(Nodes), F, Copies),
    S0 = #{driver => ?MODULE, now => 0, seq => 0, q => gb_trees:empty(), cfg => Cfg,
           nodes => Nodes, universe => Nodes, rand => rand:seed_s(exsss, {Seed, 16#f7, 16#ab}),
           reps => maps:from_list([{Nd, #{}} || Nd <- Nodes]), inc => #{}, groups => all,
           epochs => #{}, applied => #{}, ops => #{}, failures => [], faults => true,
           stats => #{}, samples => [], pool => Nodes, holders => Placement, moves => [],
           hints => #{}, acked => [], sessions => #{}, op_dots => #{}, hint_ids => #{},
           try_ids => [], down => [], crashed => #{}, lost_crash => #{}, lost_ids => #{},
           closed => [], dead => []},
    S1 = maps:fold(fun(K, Hs, Acc) ->
                           lists:foldl(fun(Nd, A) -> new_copy(Nd, K, Hs, A) end, Acc, Hs)
                   end, S0, Placement),
    hm_sim_engine:drive(S1, Trace, fun hm_sim_frag_check:finish/1).

%% @doc Run seeds `From' .. `From + Count - 1'.
-spec check_seeds({integer(), pos_integer()}, map()) ->
          {non_neg_integer(), non_neg_integer(), map(), [{integer(), hm_sim:result()}]}.
check_seeds({From, Count}, Opts) ->
    lists:foldl(fun(Seed, {P, Fl, Tot, Bad}) ->
                        Res = #{ok := Ok, stats := St} = run_seed(Seed, Opts),
                        Tot1 = hm_sim_engine:totals(St, Tot),
                        case Ok of
                            true -> {P + 1, Fl, Tot1, Bad};
                            false -> {P, Fl + 1, Tot1, Bad ++ [{Seed, Res}]}
                        end
                end, {0, 0, #{}, []}, lists:seq(From, From + Count - 1)).

%% @doc A copy of fragment K on Nd: empty, syncing unless it is one of a new table's holders.
-spec new_copy(node(), pos_integer(), [node()], map()) -> map().
new_copy(Nd, K, Members, S = #{cfg := Cfg = #{type := Type, policy := Policy},
                               reps := Reps}) ->
    Inc = maps:get({Nd, K}, maps:get(inc, S), 0) + 1,
    {R, Effs} = hm_ec_table:new(maps:merge(#{tab => frag_tab(K), type => Type,
                                             policy => Policy, record => {r, 3},
                                             cookie => sim, node => Nd, incarnation => Inc,
                                             members => Members,
                                             store => hm_ec_store_map:new(set, ram),
                                             events => true},
                                           hm_sim_crdt_table:replica_opts(Cfg))),
    S1 = S#{reps := Reps#{Nd := (maps:get(Nd, Reps))#{K => R}},
            inc := (maps:get(inc, S))#{{Nd, K} => Inc}},
    effects(Nd, K, Effs, S1).

frag_tab(K) -> list_to_atom("sim_frag" ++ integer_to_list(K)).

%% @doc Nd's copy of fragment K, `none' when it holds none.
-spec copy(node(), pos_integer(), map()) -> hm_ec_table:state() | none.
copy(Nd, K, #{reps := Reps}) -> maps:get(K, maps:get(Nd, Reps), none).

-spec put_copy(node(), pos_integer(), hm_ec_table:state(), map()) -> map().
put_copy(Nd, K, R, S = #{reps := Reps}) ->
    S#{reps := Reps#{Nd := (maps:get(Nd, Reps))#{K => R}}}.

%% @doc A copy's effects: its sends go through the network tagged with the fragment; the dots
%% of the operations it submits are recorded by the caller.
-spec effects(node(), pos_integer(), [hm_ec_table:effect()], map()) -> map().
effects(Nd, K, Effs, S) ->
    S1 = lists:foldl(fun({timer, Ms, Msg}, Acc) ->
                             Inc = maps:get({Nd, K}, maps:get(inc, Acc)),
                             hm_sim_engine:schedule(Ms, {timer, Nd, K, Inc, Msg}, Acc);
                        (_, Acc) -> Acc
                     end, S, Effs),
    hm_sim_engine:send_all(Nd, [{To, {K, M}} || {send, To, M} <- Effs], S1).

%%% ================================================================ driver callbacks

-spec event(term(), map()) -> map().
event({tick, Nd}, S0 = #{down := [_ | _], now := Now, cfg := #{duration := Dur}})
  when Now > Dur ->
    %% the final heal restarts every crashed node (but a dead one)
    tick(Nd, lists:foldl(fun hm_sim_frag_churn:restart/2, S0,
                         hm_sim_frag_churn:restartable(S0)));
event({tick, Nd}, S0) ->
    tick(Nd, S0);
event({deliver, From, To, {K, Msg}, Epoch}, S) ->
    case hm_sim_engine:deliverable(From, To, Epoch, S) andalso copy(To, K, S) of
        false -> hm_sim_engine:bump(dropped_cut, S);
        none -> hm_sim_engine:bump(dropped_no_copy, S);      % moved away: the runtime drops it too
        R ->
            {R1, Effs} = hm_ec_table:handle(From, sim, Msg, R),
            effects(To, K, Effs, put_copy(To, K, R1, S))
    end;
event({action, A}, S) ->
    action(A, hm_sim_engine:bump(actions, S));
event({timer, Nd, K, Inc, Msg}, S) ->
    %% a CRDT table's broadcast epoch, on the copy that set it if it is still there
    case {copy(Nd, K, S), maps:get({Nd, K}, maps:get(inc, S))} of
        {none, _} -> S;
        {R, Inc} ->
            {R1, Effs} = hm_ec_table:timeout(Msg, R),
            effects(Nd, K, Effs, put_copy(Nd, K, R1, S));
        _ -> S
    end.

%% Nd's tick: each of its copies ticks, it hands off its hints, and the moves advance.
tick(Nd, S0) ->
    S = hm_sim_engine:schedule(?TICK, {tick, Nd}, hm_sim_frag_churn:crash_armed(S0)),
    Up = reachable(Nd, S),
    S1 = maps:fold(fun(K, R, Acc) ->
                           {R1, Effs} = hm_ec_table:tick(Up, R),
                           effects(Nd, K, Effs, put_copy(Nd, K, R1, Acc))
                   end, S, maps:get(Nd, maps:get(reps, S))),
    hm_sim_frag_churn:advance_moves(hm_sim_frag_writes:hand_off(Nd, S1)).

-spec nodeup(node(), node(), map()) -> map().
nodeup(At, Peer, S) ->
    maps:fold(fun(K, R, Acc) ->
                      {R1, Effs} = hm_ec_table:nodeup(Peer, R),
                      effects(At, K, Effs, put_copy(At, K, R1, Acc))
              end, S, maps:get(At, maps:get(reps, S))).

-spec action(term(), map()) -> map().
action({op, Nd, Key, Spec}, S = #{down := Down}) ->
    case lists:member(Nd, Down) of
        true -> hm_sim_engine:bump(ops_on_crashed_node, S);   % a client on a crashed node: none
        false -> hm_sim_frag_writes:client_op(Nd, Key, Spec, S)
    end;
action({crash, Nd}, S) -> hm_sim_frag_churn:crash(Nd, S);
action({die, Nd}, S) -> hm_sim_frag_churn:die(Nd, S);
action(crash_hinted, S) ->
    case hm_sim_frag_churn:hinted(S) of
        [] -> S#{armed => true};                % the first node to hold hints, later
        [Nd | _] -> hm_sim_engine:bump(crashes_holding_hints, hm_sim_frag_churn:crash(Nd, S))
    end;
action({restart, Nd}, S) -> hm_sim_frag_churn:restart(Nd, S);
action(restart_all, S = #{down := Down}) ->
    lists:foldl(fun hm_sim_frag_churn:restart/2, S, Down);
action({partition, Shape, Groups}, S) ->
    hm_sim_engine:bump({partition, Shape}, hm_sim_engine:reconnect(S#{groups := Groups}, S));
action(heal, S) ->
    hm_sim_engine:reconnect(S#{groups := all}, S);
action({pool, Change, Nd}, S = #{pool := Pool, moves := []}) ->
    NewPool = case Change of
                  del -> Pool -- [Nd];
                  add -> lists:usort([Nd | Pool])
              end,
    case NewPool =:= Pool orelse NewPool =:= [] of
        true -> S;
        false ->
            S1 = case Change =:= del andalso hm_sim_frag_churn:dead(Nd, S) of
                     true -> hm_sim_engine:bump(dead_nodes_removed, S);
                     false -> S
                 end,
            hm_sim_frag_churn:start_moves(NewPool, hm_sim_engine:bump({pool, Change}, S1))
    end;
action({pool, _, _}, S) ->
    hm_sim_engine:bump(pool_change_skipped, S);               % one change at a time, as the runtime
action(_, S) -> S.

%% @doc The nodes Nd reaches: up (not crashed) and connected.
-spec reachable(node(), map()) -> [node()].
reachable(Nd, S = #{down := Down}) -> hm_sim_engine:reachable(Nd, S) -- Down.

-spec converged(map()) -> boolean().
converged(S) -> hm_sim_frag_check:converged(S).

-spec quiescent(map()) -> boolean().
quiescent(S) -> hm_sim_frag_check:quiescent(S).
