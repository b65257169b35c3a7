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
%% ({@link hm_ring:placement/3}, {@link hm_ring:moves/2}), and the condition for removing a
%% copy that leaves ({@link hm_partition:removable/3}). A move adds the new copies (empty,
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
%% incarnation of each copy it still holds.
%%
%% Checkers: (1) every fragment's holders converge (same rows, same delivered vector); (2) no
%% lost acknowledged write: every write a node applied or passed on, and every hint it kept,
%% is delivered by every holder of its fragment at the end (so no hint is left), except a
%% hint held by a node that crashed, and a write no other copy had delivered when the copy
%% that took it crashed: those are counted as lost with the crash; (3) the placement is the
%% ring's for the final pool; (4) every fragment has its `N' copies (or all the pool) and no
%% node outside the pool holds one; (5) session order: each operation a node issues on a
%% key is causally after the one it issued before on that key, wherever each was applied
%% (see {@link hm_ec_hints}; per node incarnation, and not after a write whose copy crashed).
-module(hm_sim_frag).

-export([gen/2, run/2, run_seed/2, check_seeds/2]).
-export([event/2, nodeup/3, action/2, converged/1, quiescent/1]).

%% a copy's tick: the runtime's schedule
-define(TICK, hm_ec_table_schedule:tick_ms()).
-define(KEYS, [k1, k2, k3, k4, k5, k6]).
-define(VALUES, [a, b, c]).

%%% ================================================================ schedules

%% @doc The configuration and trace of seed `Seed'.
-spec gen(integer(), map()) -> {map(), [hm_sim:action()]}.
gen(Seed, Opts) ->
    R0 = rand:seed_s(exsss, {Seed, 16#f4a9, 16#51e}),
    {[N, F, Copies, TI, Drop, Dup, Delay, NOps, NFaults, Back], R1} =
        hm_sim:draws([{int, 4, 6}, {int, 3, 8}, {int, 2, 3}, {int, 1, 2}, {int, 0, 10},
                      {int, 0, 10}, {int, 1, 100}, {int, 30, 80}, {int, 0, 3}, {int, 0, 1}],
                     R0),
    Cfg = crdt_spec(Seed, maps:merge(#{kind => frag, n => N, fragments => F, copies => Copies,
                                       type => element(TI, {pawset, prwset}),
                                       policy => term_order, storage => ram,
                                       drop => Drop / 100, dup => Dup / 100, delay => Delay,
                                       duration => 5000, seed => Seed, skew => #{}}, Opts)),
    Nodes = hm_sim:nodes_of(maps:get(n, Cfg)),
    Dur = maps:get(duration, Cfg),
    {Ops0, R2} = gen_ops(NOps, Nodes, Dur, R1),
    Ops = crdt_ops(Seed, Cfg, Ops0),
    {Faults0, R3} = hm_sim:gen_faults(NFaults, Nodes, Dur, R2),
    Crashes = crashes(Cfg),
    Faults = [A || A = {_, Fa} <- Faults0, Crashes orelse (element(1, Fa) =/= crash andalso
                                                           element(1, Fa) =/= restart)],
    {Leaver, R4} = hm_sim:pick(Nodes, R3),
    {T1, R5} = rand:uniform_s(Dur div 2, R4),
    {T2, R6} = rand:uniform_s(Dur div 2, R5),
    Moves = [{T1, {pool, del, Leaver}}] ++ [{T1 + T2, {pool, add, Leaver}} || Back =:= 1],
    %% a node holding hints crashes (the first that holds some then), in 3 seeds of 4
    {[TC, LC, CI], _} = hm_sim:draws([{int, 1, Dur}, {int, 1, Dur div 2}, {int, 1, 4}], R6),
    Hinted = [A || Crashes, CI =< 3,
                   A <- [{TC, crash_hinted}, {min(Dur, TC + LC), restart_all}]],
    {Cfg, lists:keysort(1, Ops ++ Faults ++ Moves ++ Hinted)}.

%% Crashes (of any node, and of a node holding hints) on a table of records, unless the
%% option `crash => false' turns them off; a CRDT table's schedules have none.
crashes(#{crdt := _}) -> false;
crashes(Cfg) -> maps:get(crash, Cfg, true).

%% `crdt => any': the seed picks the type and flavor, and an epoch of 50 to 500 ms.
crdt_spec(Seed, Cfg = #{crdt := any}) ->
    Combos = hm_sim_crdt_table:combos(),
    Cfg#{crdt := lists:nth(1 + Seed rem length(Combos), Combos),
         epoch => maps:get(epoch, Cfg, 50 + (Seed * 37) rem 451)};
crdt_spec(_, Cfg) -> Cfg.

%% A CRDT table (option `crdt => {Type, Flavor}', and `epoch'): the same times, nodes and
%% keys, with updates of the type drawn from a random stream of their own.
crdt_ops(Seed, #{crdt := {Type, _}}, Ops) ->
    {Ups, _} = lists:mapfoldl(fun({T, {op, Nd, Key, _}}, R) ->
                                      {Op, R1} = hm_sim_crdt_table:gen_op(Type, R),
                                      {{T, {op, Nd, Key, {update, Op}}}, R1}
                              end, rand:seed_s(exsss, {Seed, 16#c7f4, 16#9}), Ops),
    Ups;
crdt_ops(_, _, Ops) -> Ops.

gen_ops(0, _, _, R) -> {[], R};
gen_ops(K, Nodes, Dur, R) ->
    {[T, NI, KI, VI, OI], R1} =
        hm_sim:draws([{int, 1, Dur}, {int, 1, length(Nodes)}, {int, 1, length(?KEYS)},
                      {int, 1, length(?VALUES)}, {int, 1, 10}], R),
    V = lists:nth(VI, ?VALUES),
    Op = if OI =< 7 -> {write, V};
            OI =< 9 -> delete;
            true -> {delete_object, V}
         end,
    {Rest, R2} = gen_ops(K - 1, Nodes, Dur, R1),
    {[{T, {op, lists:nth(NI, Nodes), lists:nth(KI, ?KEYS), Op}} | Rest], R2}.

%%% ================================================================ running

-spec run_seed(integer(), map()) -> hm_sim:result().
run_seed(Seed, Opts) ->
    {Cfg, Trace} = gen(Seed, Opts),
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
           closed => []},
    S1 = maps:fold(fun(K, Hs, Acc) ->
                           lists:foldl(fun(Nd, A) -> new_copy(Nd, K, Hs, A) end, Acc, Hs)
                   end, S0, Placement),
    hm_sim_engine:drive(S1, Trace, fun finish/1).

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

%% A copy of fragment K on Nd: empty, syncing unless it is one of a new table's holders.
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

copy(Nd, K, #{reps := Reps}) -> maps:get(K, maps:get(Nd, Reps), none).

put_copy(Nd, K, R, S = #{reps := Reps}) ->
    S#{reps := Reps#{Nd := (maps:get(Nd, Reps))#{K => R}}}.

%% A copy's effects: its sends go through the network tagged with the fragment; the dots
%% of the operations it submits are recorded by the caller.
effects(Nd, K, Effs, S) ->
    S1 = lists:foldl(fun({timer, Ms, Msg}, Acc) ->
                             Inc = maps:get({Nd, K}, maps:get(inc, Acc)),
                             hm_sim_engine:schedule(Ms, {timer, Nd, K, Inc, Msg}, Acc);
                        (_, Acc) -> Acc
                     end, S, Effs),
    hm_sim_engine:send_all(Nd, [{To, {K, M}} || {send, To, M} <- Effs], S1).

%%% ================================================================ driver callbacks

-spec event(term(), map()) -> map().
event({tick, Nd}, S0 = #{down := [_ | _] = Down, now := Now, cfg := #{duration := Dur}})
  when Now > Dur ->
    %% the final heal restarts every crashed node
    event({tick, Nd}, lists:foldl(fun restart/2, S0, Down));
event({tick, Nd}, S0) ->
    S = hm_sim_engine:schedule(?TICK, {tick, Nd}, crash_armed(S0)),
    Up = reachable(Nd, S),
    S1 = maps:fold(fun(K, R, Acc) ->
                           {R1, Effs} = hm_ec_table:tick(Up, R),
                           effects(Nd, K, Effs, put_copy(Nd, K, R1, Acc))
                   end, S, maps:get(Nd, maps:get(reps, S))),
    advance_moves(hand_off(Nd, S1));
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
        false -> client_op(Nd, Key, Spec, S)
    end;
action({crash, Nd}, S) -> crash(Nd, S);
action(crash_hinted, S) ->
    case hinted(S) of
        [] -> S#{armed => true};                % the first node to hold hints, later
        [Nd | _] -> hm_sim_engine:bump(crashes_holding_hints, crash(Nd, S))
    end;
action({restart, Nd}, S) -> restart(Nd, S);
action(restart_all, S = #{down := Down}) ->
    lists:foldl(fun restart/2, S, Down);
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
        false -> start_moves(NewPool, hm_sim_engine:bump({pool, Change}, S))
    end;
action({pool, _, _}, S) ->
    hm_sim_engine:bump(pool_change_skipped, S);               % one change at a time, as the runtime
action(_, S) -> S.

client_op(Nd, Key, Spec, S = #{cfg := Cfg = #{fragments := F}, now := Now}) ->
    K = hm_ec_frag:fragment(Key, F),
    KeyOp = case Spec of
                {update, Op} -> {Key, {update, hm_sim_crdt_table:client_op(Op, Now, Cfg)}};
                {write, V} -> {Key, {write, {r, Key, V}}};
                delete -> {Key, delete};
                {delete_object, V} -> {Key, {delete_object, {r, Key, V}}}
            end,
    Id = maps:get(ops, maps:get(stats, S), 0),
    S1 = session_issue(Nd, Key, Id, hm_sim_engine:bump(ops, S)),
    case copy(Nd, K, S1) of
        none -> pass_on(Nd, K, {Id, KeyOp}, S1);
        R ->
            case hm_ec_table:status(R) =:= ready andalso
                maps:get({Nd, K}, maps:get(hints, S1), []) =:= [] of
                false -> pass_on(Nd, K, {Id, KeyOp}, S1);   % syncing, or behind its hints
                true ->
                    %% a copy behind this node's earlier writes passed on: passed on too
                    case submit_at(Nd, Nd, K, KeyOp, S1#{try_ids := [Id]}) of
                        {ok, S2} -> S2;
                        {unreachable, S2} -> pass_on(Nd, K, {Id, KeyOp}, S2)
                    end
            end
    end.

%%% ================================================================ crashes

%% Nd crashes: its links break (what is in flight on them is lost), its ram copies go, and
%% so do its hints and its sessions (held in memory). An acknowledged write that no other
%% copy of its fragment has delivered is lost with the crash, as a hint of Nd is; both are
%% counted, not failed.
crash(Nd, S0 = #{down := Down, nodes := Nodes, hints := Hints, hint_ids := HIds,
                 sessions := Ss, acked := Acked}) ->
    case lists:member(Nd, Down) of
        true -> S0;
        false ->
            S1 = lists:foldl(fun(M, Acc) -> hm_sim_engine:new_epoch(Nd, M, Acc) end, S0,
                             Nodes -- [Nd]),
            Held = maps:get(Nd, maps:get(reps, S1)),
            Others = fun(K) -> [R || M <- Nodes -- [Nd | Down], R <- [copy(M, K, S1)],
                                     R =/= none] end,
            Has = fun(Dot, R) -> hm_vv:contains(Dot, hm_tcsb:delivered(hm_ec_table:tcsb(R)))
                  end,
            Lost = [{K, Dot} || {K, Dot} <- Acked, is_map_key(K, Held),
                                Has(Dot, maps:get(K, Held)),
                                not lists:any(fun(R) -> Has(Dot, R) end, Others(K))],
            Mine = [{Key, Hs} || Key = {N, _} <- maps:keys(Hints), N =:= Nd,
                                 Hs <- [maps:get(Key, Hints)]],
            LostIds = [maps:get(Seq, HIds) || {_, Hs} <- Mine, {Seq, _} <- Hs],
            {Closed, Open} = lists:partition(fun({{N, _}, _}) -> N =:= Nd end,
                                             maps:to_list(Ss)),
            Svv = maps:filter(fun({N, _}, _) -> N =/= Nd end, maps:get(svv, S1, #{})),
            S2 = S1#{down := [Nd | Down],
                     reps := (maps:get(reps, S1))#{Nd := #{}},
                     crashed := (maps:get(crashed, S1))#{Nd => maps:keys(Held)},
                     hints := maps:without([Key || {Key, _} <- Mine], Hints),
                     gone => maps:merge(maps:get(gone, S1, #{}),
                                        maps:from_list(
                                          [{{K, hm_tcsb:self(hm_ec_table:tcsb(R))}, true}
                                           || {K, R} <- maps:to_list(Held)])),
                     lost_crash := maps:merge(maps:get(lost_crash, S1),
                                              maps:from_list([{L, true} || L <- Lost])),
                     lost_ids := maps:merge(maps:get(lost_ids, S1),
                                            maps:from_list([{I, true} || I <- LostIds])),
                     sessions := maps:from_list(Open),
                     closed := Closed ++ maps:get(closed, S1),
                     svv => Svv},
            hm_sim_engine:bump(hints_lost_with_crash, length(LostIds),
                               hm_sim_engine:bump(crashes, S2))
    end.

%% The nodes up that hold hints.
hinted(#{hints := Hints, down := Down}) ->
    lists:usort([Nd || {{Nd, _}, [_ | _]} <- maps:to_list(Hints), not lists:member(Nd, Down)]).

%% A crash of a node holding hints was due while none held any: the first that does, in the
%% work phase.
crash_armed(S = #{armed := true, now := Now, cfg := #{duration := Dur}}) when Now =< Dur ->
    case hinted(S) of
        [] -> S;
        [Nd | _] -> hm_sim_engine:bump(crashes_holding_hints, crash(Nd, S#{armed := false}))
    end;
crash_armed(S) -> S.

%% Nd restarts: a new, empty incarnation of each copy it held and still holds (a ram copy:
%% it catches up by state transfer), then it and its peers see each other come up.
restart(Nd, S = #{down := Down, holders := Holders}) ->
    case lists:member(Nd, Down) of
        false -> S;
        true ->
            Ks = maps:get(Nd, maps:get(crashed, S)),
            S1 = S#{down := Down -- [Nd]},
            S2 = lists:foldl(fun(K, Acc) ->
                                     Hs = maps:get(K, Holders),
                                     case lists:member(Nd, Hs) of
                                         true -> new_copy(Nd, K, Hs, Acc);
                                         false -> Acc
                                     end
                             end, S1, Ks),
            lists:foldl(fun(M, Acc) -> nodeup(M, Nd, nodeup(Nd, M, Acc)) end,
                        hm_sim_engine:bump(restarts, S2), reachable(Nd, S2))
    end.

%%% ================================================================ writes, hints

%% Submit at Nd's ready copy of fragment K a client operation issued on node By: an
%% acknowledged operation, by its dot; `unreachable' when the copy has not delivered By's
%% earlier writes passed on (the runtime's session order, hm_ec_table:submit_after/6).
submit_at(By, Nd, K, KeyOp, S = #{now := Now}) ->
    R = copy(Nd, K, S),
    After = session(By, K, S),
    {R1, Effs} = hm_ec_table:submit_after(After, KeyOp, async, client,
                                          {Now * 1000, reachable(Nd, S)}, R),
    case [Reply || {reply, client, Reply} <- Effs] of
        [{error, {behind, _}}] ->
            {unreachable, hm_sim_engine:bump(refused_behind, S)};
        [{ok, Dot}] ->
            %% the runtime notes the dots of writes passed on, and of local ones once the
            %% node has a session (hm_ec_server)
            S1 = case By =/= Nd orelse map_size(After) > 0 of
                     true -> note(By, K, Dot, put_copy(Nd, K, R1, S));
                     false -> put_copy(Nd, K, R1, S)
                 end,
            case KeyOp of
                {Key, {update, Op}} ->
                    %% a CRDT table's update: acknowledged when this copy took it
                    {Id, Info} = hm_sim_crdt_table:recorded(Key, Op, Effs, R1, maps:get(cfg, S)),
                    Us = maps:get(updates, S1, #{}),
                    {ok, effects(Nd, K, Effs, S1#{acked := [{K, Id} | maps:get(acked, S1)],
                                                  updates => Us#{Id => Info}})};
                _ -> submit_record(Nd, K, Effs, S1)
            end
    end.

session(By, K, S) -> maps:get({By, K}, maps:get(svv, S, #{}), #{}).

note(By, K, Dot, S) ->
    Svv = maps:get(svv, S, #{}),
    S#{svv => Svv#{{By, K} => hm_ec_hints:session_add(Dot, session(By, K, S))}}.

submit_record(Nd, K, Effs, S1) ->
    case [Msg || {send, _, {op, Msg}} <- Effs] ++ [M || {event, {applied, M}} <- Effs] of
        [{O, Ts, _} | _] ->
            Dot = {O, maps:get(O, Ts)},
            S2 = session_applied(Dot, Ts, S1),
            {ok, effects(Nd, K, Effs, S2#{acked := [{K, Dot} | maps:get(acked, S2)]})};
        [] ->
            {ok, effects(Nd, K, Effs, S1)}
    end.

%% Session order: the client operations each node issued on each key, in issue order (a
%% table of records; a CRDT table's updates are checked by the type's spec instead).
session_issue(_Nd, _Key, _Id, S = #{cfg := #{crdt := _}}) -> S;
session_issue(Nd, Key, Id, S = #{sessions := Ss}) ->
    S#{sessions := Ss#{{Nd, Key} => [Id | maps:get({Nd, Key}, Ss, [])]}}.

%% The operation being applied (the first of `try_ids', the order in which the writes of
%% one hand-off are tried) got dot `Dot' and causal timestamp `Ts'.
session_applied(Dot, Ts, S = #{try_ids := [Id | Ids], op_dots := Ds}) ->
    S#{try_ids := Ids, op_dots := Ds#{Id => {Dot, Ts}}};
session_applied(_, _, S) -> S.

%% Nd has no ready copy of K: the runtime's pass-on, with Nd's hints of K first.
pass_on(Nd, K, IdKeyOp, S) ->
    S1 = run_pass_on(Nd, K, IdKeyOp, S),
    hm_sim_engine:bump(passed_on, S1).

run_pass_on(Nd, K, IdNew, S = #{hints := Hints, hint_ids := HIds}) ->
    Mine = maps:get({Nd, K}, Hints, []),
    {NewId, New} = case IdNew of
                       none -> {none, none};
                       {_, _} -> IdNew
                   end,
    Try = fun(KeyOp, Acc) -> try_holders(Nd, K, KeyOp, Acc) end,
    Ids = [maps:get(Seq, HIds) || {Seq, _} <- Mine] ++ [NewId || New =/= none],
    {Sent, Outcome, S1} = hm_ec_hints:pass_on(Mine, New, Try, S#{try_ids := Ids}),
    Left = [H || H = {Id, _} <- Mine, not lists:member(Id, Sent)],
    Seq = maps:get(seq, S1),
    Kept = case Outcome of
               kept -> Left ++ [{Seq, New}];
               _ -> Left
           end,
    S2 = case Outcome of
             kept ->
                 HIds1 = (maps:get(hint_ids, S1))#{Seq => NewId},
                 hm_sim_engine:bump(hints_kept, S1#{seq := Seq + 1, hint_ids := HIds1});
             _ -> S1
         end,
    S2#{hints := (maps:get(hints, S2))#{{Nd, K} => Kept}, try_ids := []}.

%% The first holder of K that Nd reaches, that is ready and that has delivered Nd's earlier
%% writes passed on takes the write (any other refuses it, and the next is tried).
try_holders(Nd, K, KeyOp, S = #{holders := Holders}) ->
    Up = [H || H <- reachable(Nd, S), copy(H, K, S) =/= none,
               hm_ec_table:status(copy(H, K, S)) =:= ready],
    Own = [Nd || copy(Nd, K, S) =/= none,                  % the copy here first, as the
                 hm_ec_table:status(copy(Nd, K, S)) =:= ready],      % runtime tries it
    first_taking(Nd, K, KeyOp, Own ++ hm_ec_frag:holder_order(Nd, maps:get(K, Holders), Up), S).

%% A holder behind Nd's earlier writes refuses: the next is tried.
first_taking(_Nd, _K, _KeyOp, [], S) -> {unreachable, S};
first_taking(Nd, K, KeyOp, [H | Hs], S) ->
    case submit_at(Nd, H, K, KeyOp, S) of
        {unreachable, S1} -> first_taking(Nd, K, KeyOp, Hs, S1);
        Taken -> Taken
    end.

hand_off(Nd, S = #{hints := Hints}) ->
    maps:fold(fun({N, K}, [_ | _], Acc) when N =:= Nd -> run_pass_on(Nd, K, none, Acc);
                 (_, _, Acc) -> Acc
              end, S, Hints).

%%% ================================================================ moves

start_moves(NewPool, S = #{pool := Pool, cfg := #{fragments := F, copies := N}}) ->
    Old = hm_ring:placement(hm_ring:new(Pool), F, N),
    New = hm_ring:placement(hm_ring:new(NewPool), F, N),
    S#{pool := NewPool, moves := hm_ring:moves(Old, New)}.

%% Each tick, each move goes as far as it can: add the new copies (every holder must be able
%% to talk, as Mnesia needs), then remove the leaving ones once the new are ready and the
%% others hold what each leaving one originated.
advance_moves(S = #{moves := []}) -> S;
advance_moves(S = #{moves := Moves}) ->
    {Left, S1} = lists:foldl(fun(Move, {Acc, St}) ->
                                     case step(Move, St) of
                                         {done, St1} -> {Acc, St1};
                                         {Next, St1} -> {[Next | Acc], St1}
                                     end
                             end, {[], S}, Moves),
    S1#{moves := lists:reverse(Left)}.

step({K, Add, Remove} = Move, S = #{holders := Holders}) ->
    Hs = maps:get(K, Holders),
    All = lists:usort(Hs ++ Add),
    case all_talk(All, S) of
        false -> {Move, S};
        true ->
            case Add -- Hs of
                [_ | _] = New ->
                    S1 = S#{holders := Holders#{K := All}},
                    S2 = lists:foldl(fun(Nd, Acc) -> new_copy(Nd, K, All, Acc) end, S1, New),
                    {Move, members(K, All, S2)};
                [] ->
                    Ready = lists:all(fun(Nd) -> hm_ec_table:status(copy(Nd, K, S)) =:= ready
                                      end, All),
                    case Ready andalso lists:all(fun(Nd) -> caught_up(Nd, K, All, S) end,
                                                 Remove) of
                        false -> {Move, S};
                        true ->
                            Final = All -- Remove,
                            S1 = lists:foldl(fun(Nd, Acc) -> drop_copy(Nd, K, Acc) end, S,
                                             Remove),
                            {done, members(K, Final, S1#{holders := Holders#{K := Final}})}
                    end
            end
    end.

all_talk(Nodes, S) ->
    lists:all(fun(A) -> lists:all(fun(B) -> talk(A, B, S) end, Nodes) end, Nodes).

talk(A, B, S = #{down := Down}) ->
    not lists:member(A, Down) andalso not lists:member(B, Down) andalso
        hm_sim_engine:connected(A, B, S).

%% The nodes Nd reaches: up (not crashed) and connected.
reachable(Nd, S = #{down := Down}) -> hm_sim_engine:reachable(Nd, S) -- Down.

caught_up(Nd, K, All, S) ->
    Delivered = fun(N) -> hm_tcsb:delivered(hm_ec_table:tcsb(copy(N, K, S))) end,
    hm_partition:removable(Nd, hm_ec_table:info([], copy(Nd, K, S)),
                           [Delivered(N) || N <- All -- [Nd]]).

drop_copy(Nd, K, S = #{reps := Reps}) ->
    hm_sim_engine:bump(copies_removed, S#{reps := Reps#{Nd := maps:remove(K, maps:get(Nd, Reps))}}).

members(K, Ms, S) ->
    lists:foldl(fun(Nd, Acc) ->
                        case copy(Nd, K, Acc) of
                            none -> Acc;
                            R -> put_copy(Nd, K, hm_ec_table:set_members(Ms, R), Acc)
                        end
                end, S, Ms).

%%% ================================================================ checks

%% A CRDT table: every key's value on every holder of its fragment is the type's spec over
%% the updates delivered, and a counter's is within Maelstrom's bound.
crdt_values(S = #{cfg := #{crdt := {Type, Flavor}}, holders := Holders}) ->
    Us = maps:get(updates, S, #{}),
    lists:foldl(fun({K, Hs}, Acc) ->
                        Rs = [R || Nd <- Hs, R <- [copy(Nd, K, Acc)], R =/= none],
                        Views = [{Nd, hm_sim_crdt_table:view(copy(Nd, K, Acc))}
                                 || Nd <- Hs, copy(Nd, K, Acc) =/= none],
                        Keys = lists:usort([Key || {Key, _} <- maps:keys(Us),
                                                   hm_ec_frag:fragment(Key, maps:size(Holders))
                                                       =:= K]),
                        Fs = lists:append([hm_sim_crdt_table:key_check(Key, Type, Flavor, hd(Rs),
                                                                        Us, Views)
                                           || Rs =/= [], Key <- Keys]),
                        lists:foldl(fun hm_sim_engine:fail/2, Acc, Fs)
                end, S, maps:to_list(Holders));
crdt_values(S) -> S.

-spec converged(map()) -> boolean().
converged(S = #{holders := Holders, moves := Moves, hints := Hints}) ->
    Moves =:= [] andalso lists:all(fun(Hs) -> Hs =:= [] end, maps:values(Hints)) andalso
        lists:all(fun({K, Hs}) -> fragment_converged(K, Hs, S) end, maps:to_list(Holders)).

fragment_converged(K, Hs, S) ->
    Rs = [copy(Nd, K, S) || Nd <- Hs],
    Shown = case maps:get(cfg, S) of
                #{crdt := _} -> fun hm_sim_crdt_table:view/1;    % a CRDT table: per-key values
                _ -> fun rows/1
            end,
    hm_sim_engine:copies_converged(Rs, Shown).

-spec quiescent(map()) -> boolean().
quiescent(S = #{holders := Holders}) ->
    converged(S) andalso
        lists:all(fun({K, Hs}) ->
                          lists:all(fun(Nd) ->
                                            R = copy(Nd, K, S),
                                            B = hm_ec_table:tcsb(R),
                                            hm_tcsb:log_size(B) =:= 0 andalso
                                                hm_tcsb:pending(B) =:= 0 andalso
                                                (not is_map_key(crdt, maps:get(cfg, S)) orelse
                                                 hm_sim_crdt_table:leftovers(R) =:= [])
                                    end, Hs)
                  end, maps:to_list(Holders)).

%% What reads show on the copy, per key (a CRDT table's updates its rows lack included).
rows(R) -> maps:groups_from_list(fun(Rec) -> element(2, Rec) end, hm_ec_table:rows(R)).

%% Session order: each operation a node issued on a key is causally after the one it issued
%% before on that key (its timestamp names that one's dot), wherever each was applied: by
%% the node's own copy, by a holder it was passed to, or by a holder a hint was handed to.
%% Operations on keys of one fragment are ordered the same way; checking per key is what a
%% client can observe (a later write of the key superseding an earlier one).
%% A node's session ends when it crashes (it is in memory), and an operation lost with a
%% crash (a hint, or a write no other copy had) orders nothing after it. Nor does one taken
%% by a copy that crashed later: holders stop waiting for the dots of a gone incarnation
%% (hm_ec_table:covers/2), which is the documented exception.
session_order(S = #{sessions := Ss0, closed := Closed, op_dots := Ds, lost_crash := LC,
                    cfg := #{fragments := F}}) ->
    Ss = lists:sort(maps:to_list(Ss0)) ++ Closed,
    Gone = maps:get(gone, S, #{}),
    Kept = fun(Key, A) ->
                   is_map_key(A, Ds) andalso
                       begin
                           K = hm_ec_frag:fragment(Key, F),
                           {Dot = {Origin, _}, _} = maps:get(A, Ds),
                           not is_map_key({K, Dot}, LC) andalso
                               not is_map_key({K, Origin}, Gone)
                       end
           end,
    Bad = [{Nd, Key, A, B}
           || {{Nd, Key}, Rev} <- Ss,
              {A, B} <- pairs(lists:reverse(Rev)),
              Kept(Key, A), is_map_key(B, Ds),
              not after_dot(maps:get(A, Ds), maps:get(B, Ds))],
    S1 = hm_sim_engine:bump(session_pairs, lists:sum([max(0, length(L) - 1) || {_, L} <- Ss]), S),
    case Bad of
        [] -> S1;
        _ -> hm_sim_engine:fail({session_order, length(Bad),
                          [{Nd, Key, A, maps:get(A, Ds), B, maps:get(B, Ds)}
                           || {Nd, Key, A, B} <- lists:sublist(Bad, 3)]}, S1)
    end.

pairs([A, B | T]) -> [{A, B} | pairs([B | T])];
pairs(_) -> [].

after_dot({DotA, _}, {_, TsB}) -> hm_vv:contains(DotA, TsB).

finish(S0 = #{holders := Holders, pool := Pool, reps := Reps, stats := St, acked := Acked,
              hints := Hints, cfg := #{fragments := F, copies := N}}) ->
    S1 = lists:foldl(fun({K, Hs}, Acc) ->
                             case fragment_converged(K, Hs, Acc) of
                                 true -> Acc;
                                 false -> hm_sim_engine:fail({fragment_diverged, K, Hs}, Acc)
                             end
                     end, S0, maps:to_list(Holders)),
    Left = [H || H = {_, [_ | _]} <- maps:to_list(Hints)],
    S2 = case Left of
             [] -> S1;
             _ -> hm_sim_engine:fail({hints_left, Left}, S1)
         end,
    Holds = case S2 of
                #{cfg := #{crdt := {_, Flavor}}} ->
                    fun(Id, R) -> hm_sim_crdt_table:holds(Id, Flavor, R) end;
                _ ->
                    fun(Dot, R) -> hm_vv:contains(Dot, hm_tcsb:delivered(hm_ec_table:tcsb(R)))
                    end
            end,
    LostCrash = maps:get(lost_crash, S2),
    Lost = [{K, Dot} || {K, Dot} <- Acked, not is_map_key({K, Dot}, LostCrash),
                        Nd <- maps:get(K, Holders),
                        copy(Nd, K, S2) =:= none orelse not Holds(Dot, copy(Nd, K, S2))],
    S3a = case Lost of
              [] -> S2;
              _ -> hm_sim_engine:fail({acknowledged_op_lost,
                                       lists:sublist(lists:usort(Lost), 5)}, S2)
          end,
    S3 = crdt_values(S3a),
    Ring = hm_ring:placement(hm_ring:new(Pool), F, N),
    Placed = maps:map(fun(_, Hs) -> lists:sort(Hs) end, Holders),
    S4 = case maps:map(fun(_, Hs) -> lists:sort(Hs) end, Ring) of
             Placed -> S3;
             Want -> hm_sim_engine:fail({placement, Placed, Want}, S3)
         end,
    Stray = [{Nd, maps:keys(Cs)} || {Nd, Cs} <- maps:to_list(Reps), map_size(Cs) > 0,
                                    not lists:member(Nd, Pool)],
    S5 = case Stray of
             [] -> S4;
             _ -> hm_sim_engine:fail({copies_outside_pool, Stray}, S4)
         end,
    %% every client operation was applied somewhere (directly, passed on, or a hint handed off)
    %% (or kept as a hint on a node that crashed before handing it off)
    HintsLost = maps:size(maps:get(lost_ids, S5)),
    S6a = case {length(Acked) + HintsLost, maps:get(ops, St, 0)} of
              {Ops, Ops} -> S5;
              {Got, Ops} -> hm_sim_engine:fail({operations_unaccounted, Ops - Got}, S5)
          end,
    S6 = session_order(S6a),
    #{failures := Fs} = S6,
    #{ok => Fs =:= [], failures => Fs,
      stats => (maps:get(stats, S6))#{quiesced_ms => maps:get(quiesced_ms, S6),
                                      acked => length(Acked),
                                      writes_lost_with_crash => maps:size(LostCrash)}}.
