%% @doc The driver of the table copies' simulation (see {@link hm_sim}): each copy is the
%% runtime's own per-table core ({@link hm_ec_table}, over {@link hm_tcsb} and
%% {@link hm_ec_key}) on a map store ({@link hm_ec_store_map}), stepped as the runtime's
%% table process steps it (ticks, a stability step ?ACK_MS after work, flow control, a
%% receiver's queue with option `service'); client operations, copies added and removed,
%% crashes, restarts and Mnesia stopping on a node act on it. The network's events and
%% actions are {@link hm_sim_engine}'s; checkers 1, 2 and 5 are {@link hm_sim_ec_check}.
-module(hm_sim_ec).

%% for hm_sim and hm_sim_ec_check
-export([start_node/2, rows/1, meta/1]).
%% driver callbacks of hm_sim_engine
-export([event/2, action/2, nodeup/3, nodedown/3, converged/1, quiescent/1, trace_quiesce/2]).

-import(hm_sim_engine, [uniform/2, coin/2, schedule/3, schedule_at/3, bump/2, bump/3, up/2,
                        connected/3, reachable/2, new_epoch/3, send_all/3, events/3]).

%% a copy's tick, and a busy copy's stability step between ticks: the runtime's schedule
-define(TICK, hm_ec_table_schedule:tick_ms()).
-define(ACK_MS, hm_ec_table_schedule:ack_ms()).
%% a node whose writer waits for a held answer looks again this much later
-define(HELD_RETRY_MS, 10).

%%% ================================================================ copies

%% @doc Start node `Nd''s copy, a member from the start (its first incarnation).
-spec start_node(node(), map()) -> map().
start_node(Nd, S = #{nodes := Nodes, inc := Inc}) ->
    {R, Effs} = new_replica(Nd, 1, Nodes, none, S),
    S1 = S#{reps := (maps:get(reps, S))#{Nd => R}, inc := Inc#{Nd => 1},
            applied := (maps:get(applied, S))#{Nd => #{}}},
    effects(Nd, Effs, S1).

%% A table copy of the runtime's own core (hm_ec_table) on a map store: fresh, or from what
%% a crash left (`Durable', a disc store).
new_replica(Nd, Inc, Members, Durable, S) ->
    {Type, Policy, Storage, TOpts} = storage3(Nd, S),
    Store = case Durable of
                none -> hm_ec_store_map:new(case Policy of siblings -> bag; _ -> set end,
                                            Storage);
                St -> St
            end,
    Cfg = maps:get(cfg, S),
    Flow = maps:with([flow, catch_up, log_limit, part_keys, parts_late, fold_keys], Cfg),
    hm_ec_table:new(maps:merge(#{tab => sim, type => Type, policy => Policy, record => {r, 3},
                                 cookie => sim, node => Nd, incarnation => Inc,
                                 members => Members, store => Store, events => true,
                                 tcsb => TOpts},
                               maps:merge(Flow, hm_sim_crdt_table:replica_opts(Cfg)))).

%% Carry out a replica's effects: its sends go through the network, its events to the
%% checkers; replies, timers, log lines need nothing here; dropped messages are counted.
effects(Nd, Effs, S0) ->
    S = probe(Nd, Effs, S0),
    {Out, S1a} = lose_replicate([{To, M} || {send, To, M} <- Effs], S),
    Ev = [E || {event, E} <- Effs],
    S1 = case [D || {drop, D} <- Effs] of
             [] -> S1a;
             Ds -> bump(dropped_invalid, length(Ds), S1a)
         end,
    send_all(Nd, Out, events(Nd, Ev, timers(Nd, Effs, S1))).

%% Option `probe => {Fun, Acc0}' (a measurement hook for benchmarks): after every step of a
%% copy, `Fun(Now, Node, Effects, Copy, Acc)' folds what the step did (the copy's effects,
%% its sends and events included, before the network sees them) and the copy's new state
%% into an accumulator of the caller's, returned as the run's stat `probe'. It only looks:
%% the run is the same with or without it.
probe(Nd, Effs, S = #{cfg := #{probe := {F, Acc0}}, now := Now, reps := Reps}) ->
    S#{probe_acc => F(Now, Nd, Effs, maps:get(Nd, Reps), maps:get(probe_acc, S, Acc0))};
probe(_, _, S) -> S.

%% Option `drop_replicate': the share of operations' first transmissions (`{op, Msg}', sent
%% when an operation is made) lost while random faults are on; retransmissions and
%% acknowledgements go through (DottedDB's replication message loss, 10 % or 100 %, as
%% hm_sim_dotted applies it to replicate-on-write messages).
lose_replicate(Out, S = #{cfg := #{drop_replicate := P}, faults := true}) ->
    {Kept, S1} = lists:foldl(fun(O = {_, M}, {Acc, Sx}) when element(1, M) =:= op ->
                                     case coin(P, Sx) of
                                         {true, Sy} -> {Acc, bump(dropped_replicate, Sy)};
                                         {false, Sy} -> {[O | Acc], Sy}
                                     end;
                                (O, {Acc, Sx}) -> {[O | Acc], Sx}
                             end, {[], S}, Out),
    {lists:reverse(Kept), S1};
lose_replicate(Out, S) -> {Out, S}.

%% A CRDT table's timers (the broadcast epoch) go off on the copy that set them, unless it
%% went down meanwhile; a table of records sets none the simulator needs. Work a copy cut
%% into steps (`continue') goes on a millisecond later, on every table.
timers(Nd, Effs, S = #{cfg := Cfg, inc := Incs}) ->
    Inc = maps:get(Nd, Incs, 0),
    lists:foldl(fun({timer, Ms, Msg}, Acc) when is_map_key(crdt, Cfg) ->
                        schedule(Ms, {timer, Nd, Inc, Msg}, Acc);
                   ({continue, Msg}, Acc) -> schedule(1, {timer, Nd, Inc, Msg}, Acc);
                   (_, Acc) -> Acc
                end, S, Effs).

%% @doc A copy's rows, as reads show them, by key.
-spec rows(hm_ec_table:state()) -> map().
rows(R) -> hm_ec_store_map:rows_map(hm_ec_table:store(R)).

%% @doc A copy's metadata rows (the keys' CRDT states), by key.
-spec meta(hm_ec_table:state()) -> map().
meta(R) -> hm_ec_store_map:meta_map(hm_ec_table:store(R)).

storage3(Nd, #{cfg := Cfg = #{type := T, policy := P, storage := St}} = S) ->
    Nodes = maps:get(universe, S, maps:get(nodes, S)),
    Storage = case St of
                  mixed -> case index(Nd, Nodes) rem 2 of 0 -> disc; 1 -> ram end;
                  _ -> St
              end,
    {T, P, Storage, maps:with([window], Cfg)}.

index(X, L) -> length(lists:takewhile(fun(Y) -> Y =/= X end, L)) + 1.

%%% ================================================================ events

%% @doc The driver's events: ticks, deliveries, the silent cuts' events, a member's
%% operations taken from a receiver's queue, trace actions (with flow control), acks, timers.
-spec event(term(), map()) -> map().
event({tick, Nd}, S) ->
    S1 = schedule(?TICK, {tick, Nd}, S),
    case up(Nd, S1) of
        false -> S1;
        true ->
            R = maps:get(Nd, maps:get(reps, S1)),
            {R1, Effs} = hm_ec_table:tick(reachable(Nd, S1), R),
            %% stat `buffered_ticks': operations received and waiting in a causal buffer for
            %% one they depend on, summed over ticks and replicas
            S2 = sample(Nd, R1, put_rep(Nd, R1, bump(buffered_ticks,
                                                     hm_tcsb:pending(hm_ec_table:tcsb(R1)),
                                                     S1))),
            effects(Nd, Effs, S2)
    end;
event({deliver, From, To, Msg, Epoch}, S) ->
    hm_sim_engine:deliver(From, To, Msg, Epoch, fun receive_msg/4, S);
event(Ev = {silent_noticed, _}, S) ->
    hm_sim_engine:silent_event(Ev, S);
event(Ev = {link_back, _, _}, S) ->
    hm_sim_engine:silent_event(Ev, S);
event({apply, From, To, Msg, Inc}, S = #{inc := Incs}) ->
    %% a member's operations, taken from the receiver's queue once it had time for them
    case up(To, S) andalso maps:get(To, Incs) =:= Inc of
        false -> bump(dropped_queued, S);
        true -> handle_msg(From, To, Msg, S)
    end;
event({action, A = {op, Nd, _, _}}, S) ->
    %% flow control: the node's writer waits while the answer to a write is held back (a
    %% member lags on its operations); its operations wait in order behind it
    Waiting = maps:get(writer_waits, S, #{}),
    case is_map_key(Nd, Waiting) orelse held(Nd, S) of
        true ->
            W = maps:get(Nd, Waiting, []),
            S1 = S#{writer_waits => Waiting#{Nd => W ++ [A]}},
            bump(ops_held, case W of
                               [] -> schedule(?HELD_RETRY_MS, {resume, Nd}, S1);
                               _ -> S1
                           end);
        false -> action(A, bump(actions, S))
    end;
event({resume, Nd}, S = #{writer_waits := Waiting}) ->
    resume(Nd, maps:get(Nd, Waiting), S#{writer_waits := maps:remove(Nd, Waiting)});
event({action, A}, S) ->
    action(A, bump(actions, S));
event({ack, Nd, Inc}, S = #{inc := Incs}) ->
    S1 = S#{acks_armed => maps:remove({Nd, Inc}, maps:get(acks_armed, S, #{}))},
    case up(Nd, S1) andalso maps:get(Nd, Incs) =:= Inc of
        false -> S1;
        true ->
            {R1, Effs} = hm_ec_table:acknowledge(reachable(Nd, S1),
                                                 maps:get(Nd, maps:get(reps, S1))),
            effects(Nd, Effs, put_rep(Nd, R1, S1))
    end;
event({timer, Nd, Inc, Msg}, S = #{inc := Incs}) ->
    case up(Nd, S) andalso maps:get(Nd, Incs) =:= Inc of
        false -> S;
        true ->
            {R1, Effs} = hm_ec_table:timeout(Msg, maps:get(Nd, maps:get(reps, S))),
            effects(Nd, Effs, put_rep(Nd, R1, S))
    end.

put_rep(Nd, R, S = #{reps := Reps}) -> S#{reps := Reps#{Nd => R}}.

%% Whether copy `Nd' holds back the answer to one of its writes (flow control).
held(Nd, S = #{reps := Reps}) ->
    up(Nd, S) andalso hm_ec_table:held(maps:get(Nd, Reps)) > 0.

%% The writer of `Nd' goes on with the operations that waited, in order, while no answer is
%% held back; it checks again ?HELD_RETRY_MS later when one is.
resume(_, [], S) -> S;
resume(Nd, As = [A | Rest], S) ->
    case held(Nd, S) of
        true ->
            schedule(?HELD_RETRY_MS, {resume, Nd},
                     S#{writer_waits := (maps:get(writer_waits, S))#{Nd => As}});
        false -> resume(Nd, Rest, action(A, bump(actions, S)))
    end.

%% A message arrives at `To'. With option `service' (µs a member's operation costs the
%% receiver), members' operations wait in the receiver's queue and are applied one after the
%% other, each taking that long, while everything else (acknowledgements, ticks, local
%% writes) goes first, as the runtime's table process does (hm_ec_table_server); without
%% it, a receiver applies everything at once.
receive_msg(From, To, Msg, S = #{cfg := #{service := Us}, now := Now, inc := Incs})
  when element(1, Msg) =:= op; element(1, Msg) =:= ops ->
    Inc = maps:get(To, Incs),
    Busy = maps:get(busy, S, #{}),
    Start = max(Now * 1000, maps:get({To, Inc}, Busy, 0)),
    %% a retransmission round is applied a few operations at a time, as the runtime does
    %% (hm_ec_table_schedule:batches/1), each batch once the receiver had time for it
    Batches = case Msg of
                  {op, _} -> [Msg];
                  {ops, L} -> [{ops, B} || B <- hm_ec_table_schedule:batches(L)]
              end,
    {Done, S1} = lists:foldl(fun(B, {At, Acc}) ->
                                     N = case B of {op, _} -> 1; {ops, BL} -> length(BL) end,
                                     At1 = At + N * Us,
                                     {At1, schedule_at((At1 + 999) div 1000,
                                                       {apply, From, To, B, Inc}, Acc)}
                             end, {Start, S}, Batches),
    S1#{busy => Busy#{{To, Inc} => Done}};
receive_msg(From, To, Msg, S) -> handle_msg(From, To, Msg, S).

handle_msg(From, To, Msg, S) ->
    {R1, Effs} = hm_ec_table:handle(From, sim, Msg, maps:get(To, maps:get(reps, S))),
    effects(To, Effs, put_rep(To, R1, arm_ack(To, S))).

%% A copy that took a write, a member's operations or an acknowledgement runs its stability
%% step (hm_ec_table:acknowledge/2) ?ACK_MS later, as the runtime's table process does.
arm_ack(Nd, S = #{inc := Incs}) ->
    Armed = maps:get(acks_armed, S, #{}),
    Key = {Nd, maps:get(Nd, Incs, 0)},
    case Armed of
        #{Key := _} -> S;
        _ -> schedule(?ACK_MS, {ack, Nd, element(2, Key)}, S#{acks_armed => Armed#{Key => true}})
    end.

%%% ================================================================ actions

%% @doc A trace action: a client operation, a copy added or removed, a cut or a heal (the
%% engine's), a crash or a restart, Mnesia alone stopping or starting on a node.
-spec action(term(), map()) -> map().
action({op, Nd, Key, Spec}, S = #{now := Now, cfg := #{skew := Skew}}) ->
    case up(Nd, S) andalso hm_ec_table:status(maps:get(Nd, maps:get(reps, S))) of
        false -> bump(ops_skipped, S);
        syncing -> bump(ops_refused, S);             % hm_ec_server refuses: {syncing, Tab}
        ready when element(1, Spec) =:= update ->
            %% a CRDT table's update (hm_sim_crdt_table)
            {R1, Effs, S1} = hm_sim_crdt_table:update(Nd, Key, element(2, Spec),
                                                      maps:get(Nd, maps:get(reps, S)), S),
            effects(Nd, Effs, put_rep(Nd, R1, arm_ack(Nd, S1)));
        ready ->
            Rec = fun(V) -> {r, Key, V} end,
            KeyOp = case Spec of
                        {write, V} -> {Key, {write, Rec(V)}};
                        delete -> {Key, delete};
                        {delete_object, V} -> {Key, {delete_object, Rec(V)}};
                        clear -> {all, clear}
                    end,
            Clock = Now * 1000 + maps:get(Nd, Skew),
            {R1, Effs} = hm_ec_table:submit(KeyOp, async, client, {Clock, reachable(Nd, S)},
                                            maps:get(Nd, maps:get(reps, S))),
            [Msg = {O, Ts, {_, _, Op}} | _] = [M || {event, {applied, M}} <- Effs],
            Dot = {O, maps:get(O, Ts)},
            Info = #{dot => Dot, ts => Ts, key => element(1, KeyOp), op => Op,
                     holders => [], lost => false, msg => Msg},
            S1 = put_rep(Nd, R1, S#{ops := (maps:get(ops, S))#{Dot => Info}}),
            effects(Nd, Effs, bump(ops, arm_ack(Nd, S1)))
    end;
action({add, Nd}, S = #{nodes := Nodes, inc := Incs}) ->
    case lists:member(Nd, Nodes) of
        true -> S;
        false ->
            %% add_table_copy: every member learns the new member set; the new copy starts
            %% empty and catches up by state transfer
            Ms = lists:sort([Nd | Nodes]),
            S1 = set_members(Ms, S#{nodes := Ms}),
            Inc = maps:get(Nd, Incs, 0) + 1,
            {R, Effs} = new_replica(Nd, Inc, Ms, none, S1),
            S2 = S1#{reps := (maps:get(reps, S1))#{Nd => R}, inc := Incs#{Nd => Inc},
                     applied := (maps:get(applied, S1))#{Nd => #{}}},
            S3 = effects(Nd, Effs, bump(adds, S2)),
            lists:foldl(fun(M, Acc) -> nodeup(M, Nd, nodeup(Nd, M, Acc)) end, S3,
                        reachable(Nd, S3))
    end;
action({remove, Nd}, S = #{nodes := Nodes, reps := Reps, ops := Ops}) ->
    case lists:member(Nd, Nodes) andalso length(Nodes) > 1 of
        false -> S;
        true ->
            %% del_table_copy: the copy is gone for good (what only it delivered is lost),
            %% its links break, every member learns the new member set
            Ops1 = maps:map(fun(_, I = #{holders := H}) ->
                                    H1 = lists:delete(Nd, H),
                                    I#{holders := H1, lost := maps:get(lost, I) orelse H1 =:= []}
                            end, Ops),
            Ms = Nodes -- [Nd],
            S1 = lists:foldl(fun(M, Acc) -> new_epoch(Nd, M, Acc) end, S, Ms),
            S2 = hm_sim_crdt_table:mark_lost(S1#{nodes := Ms, reps := Reps#{Nd := out},
                                                 ops := Ops1}),
            bump(removes, set_members(Ms, S2))
    end;
action(A = {partition, _, _}, S) ->
    hm_sim_engine:network_action(A, S);
action(A = {silent, _, _}, S) ->
    hm_sim_engine:network_action(A, S);
action(heal, S) ->
    hm_sim_engine:network_action(heal, S);
action(A = {heal, _}, S) ->
    hm_sim_engine:network_action(A, S);
action({crash, Nd}, S) ->
    action({crash, Nd, random}, S);
action({crash, Nd, Kept}, S) ->
    case up(Nd, S) of
        false -> S;
        true ->
            %% every link of Nd breaks; the members connected to it see a nodedown
            Others = maps:get(nodes, S) -- [Nd],
            S1 = lists:foldl(fun(M, Acc) -> nodedown(M, Nd, new_epoch(Nd, M, Acc)) end, S,
                             [M || M <- Others, up(M, S), connected(Nd, M, S)]),
            S2 = lists:foldl(fun(M, Acc) -> new_epoch(Nd, M, Acc) end, S1,
                             [M || M <- Others, not up(M, S) orelse not connected(Nd, M, S)]),
            bump(crashes, take_down(Nd, Kept, S2))
    end;
action({restart, Nd}, S) ->
    case bring_up(Nd, S) of
        {ok, S1} ->
            S2 = bump(restarts, S1),
            lists:foldl(fun(M, Acc) -> nodeup(M, Nd, nodeup(Nd, M, Acc)) end, S2,
                        reachable(Nd, S2));
        none -> S
    end;
action({mnesia_stop, Nd}, S) ->
    %% Mnesia alone stops on Nd (hypermnesia keeps running, the node stays connected): the
    %% table's process goes with it. The other members' Mnesia reports mnesia_down, which
    %% their table processes take as a nodedown; Mnesia handles it before Nd's Mnesia may
    %% join again, so before a new copy of Nd exists, and after what Nd's old process sent
    %% (here: what is in flight to or from Nd is lost)
    case up(Nd, S) of
        false -> S;
        true ->
            S1 = lists:foldl(fun(M, Acc) -> nodedown(M, Nd, new_epoch(Nd, M, Acc)) end, S,
                             maps:get(nodes, S) -- [Nd]),
            bump(mnesia_stops, take_down(Nd, random, S1))
    end;
action({mnesia_start, Nd}, S) ->
    %% Mnesia is back: the ram copy comes back empty (a new incarnation that syncs), a disc
    %% copy from its disc state; nobody saw a nodedown or a nodeup
    case bring_up(Nd, S) of
        {ok, S1} -> S1;
        none -> S
    end.

%% Nd's copy stops (a crash, or Mnesia stopping there): what survives is its durable store,
%% the state after a prefix of the updates made since its last sync (Mnesia writes its log
%% asynchronously): a random one, or the first `Keep' (trace action `{crash, Nd, Keep}', `Keep'
%% a count or `all').
%% A ram copy, or a disc one with no durable broadcast state (it will take a snapshot), no
%% longer holds what it delivered; a disc one holds what its durable delivered vector says,
%% and checker 3 continues from there.
take_down(Nd, Keep, S0 = #{reps := Reps, ops := Ops, applied := Ap}) ->
    St = hm_ec_table:store(maps:get(Nd, Reps)),
    Unsynced = hm_ec_store_map:unsynced(St),
    {Kept, S1} = case Keep of
                     random -> {K1, Sx} = uniform(Unsynced + 1, S0), {K1 - 1, Sx};
                     all -> {Unsynced, S0};
                     _ -> {min(Keep, Unsynced), S0}
                 end,
    D = hm_ec_store_map:durable(St, Kept),
    State = case D of
                none -> false;
                _ -> lists:keyfind(state, 1, hm_ec_store:log_read(D))
            end,
    Stateful = State =/= false,
    Held = case State of
               {state, {_, V}} -> V;
               false -> #{}
           end,
    Ops1 = maps:map(fun(Dot, I = #{holders := H}) ->
                            case lists:member(Nd, H) andalso not hm_vv:contains(Dot, Held) of
                                true ->
                                    H1 = lists:delete(Nd, H),
                                    I#{holders := H1,
                                       lost := maps:get(lost, I) orelse H1 =:= []};
                                false -> I
                            end
                    end, Ops),
    S = S1#{reps := Reps#{Nd => {down, D, Stateful}}, ops := Ops1, applied := Ap#{Nd := Held}},
    hm_sim_crdt_table:mark_lost(S).

%% Nd's copy starts again from what survived, as a new incarnation; `none' if it is not down.
bring_up(Nd, S = #{reps := Reps, inc := Incs, nodes := Nodes}) ->
    case maps:get(Nd, Reps) of
        {down, D, _} ->
            Inc = maps:get(Nd, Incs) + 1,
            {R, Effs} = new_replica(Nd, Inc, Nodes, D, S),
            Applied = case hm_ec_table:status(R) of
                          ready -> maps:get(Nd, maps:get(applied, S));
                          syncing -> #{}
                      end,
            S1 = S#{reps := Reps#{Nd => R}, inc := Incs#{Nd => Inc},
                    applied := (maps:get(applied, S))#{Nd => Applied}},
            {ok, effects(Nd, Effs, S1)};
        _ -> none
    end.

%% Every member that is up takes the new member set (a crashed one gets it when it restarts).
set_members(Ms, S = #{reps := Reps}) ->
    S#{reps := maps:map(fun(_Nd, R = {down, _, _}) -> R;
                           (_Nd, out) -> out;
                           (Nd, R) ->
                                case lists:member(Nd, Ms) of
                                    true -> hm_ec_table:set_members(Ms, R);
                                    false -> R
                                end
                        end, Reps)}.

%% @doc `Peer' became reachable from `At' (a heal, or a restart of either): the runtime's
%% nodeup on the copy at `At'.
-spec nodeup(node(), node(), map()) -> map().
nodeup(At, Peer, S) -> link_event(At, fun(R) -> hm_ec_table:nodeup(Peer, R) end, S).

%% @doc `At' sees `Peer' go down (a cut, or Peer crashed): the runtime's nodedown.
-spec nodedown(node(), node(), map()) -> map().
nodedown(At, Peer, S) -> link_event(At, fun(R) -> hm_ec_table:nodedown(Peer, R) end, S).

%% A node event for the copy on `At', if it is up.
link_event(At, Step, S = #{reps := Reps}) ->
    case up(At, S) of
        true ->
            {R1, Effs} = Step(maps:get(At, Reps)),
            effects(At, Effs, S#{reps := Reps#{At := R1}});
        false -> S
    end.

%%% ================================================================ quiescence

%% @doc Every copy ready, with the same delivered vector and the same rows (a CRDT table's
%% own check with option `crdt').
-spec converged(map()) -> boolean().
converged(S = #{cfg := #{crdt := _}}) -> hm_sim_crdt_table:converged(S);
converged(S) -> hm_sim_ec_check:converged(S).

%% @doc Converged, and no metadata, log or held answer left (checker 5 at quiescence).
-spec quiescent(map()) -> boolean().
quiescent(S = #{cfg := #{crdt := _}}) -> hm_sim_crdt_table:quiescent(S);
quiescent(S) -> hm_sim_ec_check:quiescent(S).

%% @doc With option `trace_quiesce': every tick after the work phase, per replica, the operations
%% it delivered, buffered and logged, and how many it has still to apply (`service').
-spec trace_quiesce(non_neg_integer(), map()) -> ok.
trace_quiesce(Ms, #{cfg := #{trace_quiesce := true}, nodes := Nodes, reps := Reps}) ->
    Row = [case maps:get(Nd, Reps) of
               {down, _, _} -> {Nd, down};
               R -> B = hm_ec_table:tcsb(R),
                    {Nd, lists:sum(maps:values(hm_tcsb:delivered(B))), hm_tcsb:pending(B),
                     hm_tcsb:log_size(B)}
           end || Nd <- Nodes],
    io:format("+~p ms ~w~n", [Ms, Row]),
    Up = [{Nd, R} || Nd <- Nodes, R <- [maps:get(Nd, Reps)], element(1, R) =/= down],
    Most = lists:foldl(fun({_, R}, A) -> hm_vv:join(A, hm_tcsb:delivered(hm_ec_table:tcsb(R))) end,
                       #{}, Up),
    [begin
         D = hm_tcsb:delivered(hm_ec_table:tcsb(R)),
         io:format("   ~p lacks ~w~n   from ~w~n",
                   [Nd, [{O, hm_vv:get(O, D), C} || {O, C} <- maps:to_list(Most), hm_vv:get(O, D) < C],
                    [begin
                         X = hm_tcsb:retransmission(hm_ec_table:tcsb(R2)),
                         {M, maps:get(tick, X) - maps:get(Nd, maps:get(acked, X), -99),
                          case maps:get(Nd, maps:get(flight, X), none) of
                              {Cut, Rounds, W} -> {maps:to_list(Cut), [At || {At, _} <- Rounds], W};
                              none -> none
                          end,
                          maps:get(Nd, maps:get(reported, X), none)}
                     end || {M, R2} <- Up, M =/= Nd]])
     end || {Nd, R} <- Up, not hm_vv:leq(Most, hm_tcsb:delivered(hm_ec_table:tcsb(R)))],
    ok;
trace_quiesce(_, _) -> ok.

%% metadata sample of one replica at a tick (for the scale report): bytes of the hm_meta
%% rows over the keys the replica knows, and of the delivered vector
sample(n1, R, S = #{samples := Sm, faults := true}) ->
    Meta = meta(R),
    Keys = lists:usort(maps:keys(Meta) ++ maps:keys(rows(R))),
    Bytes = lists:sum([byte_size(term_to_binary({hm_meta, K, KS})) || {K, KS} <- maps:to_list(Meta)]),
    VV = byte_size(term_to_binary(hm_tcsb:delivered(hm_ec_table:tcsb(R)))),
    S#{samples := [{Bytes, max(1, length(Keys)), VV} | Sm]};
sample(_, _, S) -> S.
