%% @doc The simulator's engine, shared by every family (see {@link hm_sim}): the seeded
%% scheduler (`rand:seed_s', explicit state; simulated milliseconds, no wall clock), the
%% faulty network (drops, duplicates, delays, connection epochs, partitions of four shapes,
%% silent cuts, links of bounded capacity), online checkers 3 (causal delivery) and 4
%% (stability safety) and checker 1 on table copies, the end of a run (final heal,
%% quiescence) and the minimiser of failing traces. The helpers that make schedules (random
%% draws, generated faults) are {@link hm_sim}'s.
%%
%% A family is a driver module: it puts `driver => Module' in the simulator state and exports
%% `event/2' (every scheduled event: ticks, deliveries, trace actions), `nodeup/3',
%% `action/2' (a trace action), `converged/1' and `quiescent/1'; and, when it needs them,
%% `nodedown/3' (a node sees a peer go down; drivers without it take no notice) and
%% `trace_quiesce/2' (what the option `trace_quiesce' prints every tick of quiescence).
%% The table copies' driver is {@link hm_sim_ec}; the others are {@link hm_sim_crdt},
%% {@link hm_sim_dotted} and {@link hm_sim_frag}.
-module(hm_sim_engine).

%% silent partitions in a schedule
-export([silent_action/3]).
%% the scheduler and a driver's run
-export([drive/3, drive/4, uniform/2, coin/2, schedule/3, schedule_at/3, bump/2, bump/3, run_until/2,
         final_heal/1, quiesce/2]).
%% the network
-export([up/2, connected/3, reachable/2, deliverable/4, deliver/6, silent_event/2,
         network_action/2, reconnect/2, epoch/3, new_epoch/3, send_all/3]).
%% checkers, minimisation, campaign totals
-export([fail/2, events/3, reps/1, copies_converged/2, minimise_with/3, print_minimised/8,
         totals/2, fault_line/1]).
-export_type([action/0, result/0]).

%% a node's tick: the runtime's schedule
-define(TICK, hm_ec_table_schedule:tick_ms()).
-define(QUIESCE_CAP, 60000).
%% option `silent': a silent cut this long is noticed (the tick time), and the messages a
%% connection's buffers take when its link has no `link_cap'
-define(SILENT_NOTICED_MS, 2000).
-define(SILENT_BUFFER, 16).
%% a connection across a silent cut may stay silent this long after the heal, at most
-define(SILENT_LAG_MS, 1500).

-type action() :: {non_neg_integer(), term()}.
-type result() :: #{ok := boolean(), failures := [term()], stats := map()}.

%%% ================================================================ silent schedules

%% @doc A partition of a schedule made silent, and its heal: about half the connections across
%% the cut (each with a coin) lag, by up to ?SILENT_LAG_MS, and by less than what is left of
%% ?SILENT_NOTICED_MS since the cut (or its last change of shape) at the heal.
-spec silent_action(action(), [node()], {[action()], none | {integer(), [[node()]]}, rand:state()})
          -> {[action()], none | {integer(), [[node()]]}, rand:state()}.
silent_action({T, {partition, Shape, Groups}}, _, {Acc, _, R}) ->
    {[{T, {silent, Shape, Groups}} | Acc], {T, Groups}, R};
silent_action({T, heal}, Universe, {Acc, {T0, Groups}, R}) ->
    Max = min(?SILENT_LAG_MS, T0 + ?SILENT_NOTICED_MS - T - 1),
    Pairs = [{A, B} || A <- Universe, B <- Universe, A < B, not same_side(A, B, Groups)],
    {Lags, R1} = lists:foldl(fun({A, B}, {L, Ra}) ->
                                     {U, Ra1} = rand:uniform_s(Ra),
                                     {Ms, Ra2} = rand:uniform_s(max(1, Max), Ra1),
                                     case U < 0.5 andalso Max >= 1 of
                                         true -> {[{A, B, Ms} | L], Ra2};
                                         false -> {L, Ra2}
                                     end
                             end, {[], R}, Pairs),
    {[{T, {heal, lists:reverse(Lags)}} | Acc], none, R1};
silent_action(A, _, {Acc, Cut, R}) ->
    {[A | Acc], Cut, R}.

%%% ================================================================ scheduler

%% @doc A driver's run from its initial state `S1' (replicas started): a tick chain for every
%% node, the trace's actions within the work phase, the work phase, the final heal,
%% quiescence, then `Finish'; an exception is a failure.
-spec drive(map(), [action()], fun((map()) -> result())) -> result().
drive(S1 = #{nodes := Nodes}, Trace, Finish) -> drive(S1, Nodes, Trace, Finish).

%% @doc {@link drive/3} with a tick chain for each of `TickNodes' (the EC driver's: every
%% node of its universe, those that join later too).
-spec drive(map(), [node()], [action()], fun((map()) -> result())) -> result().
drive(S1 = #{cfg := #{duration := Dur}}, Nodes, Trace, Finish) ->
    try
        S2 = lists:foldl(fun(Nd, Acc) ->
                                 {Off, Acc1} = uniform(?TICK, Acc),
                                 schedule(Off, {tick, Nd}, Acc1)
                         end, S1, Nodes),
        S3 = lists:foldl(fun({T, A}, Acc) -> schedule_at(T, {action, A}, Acc) end, S2,
                         [{T, A} || {T, A} <- Trace, T < Dur]),
        Finish(quiesce(Dur, final_heal(run_until(Dur, S3))))
    catch Class:Reason:Stack ->
            #{ok => false, failures => [{exception, Class, Reason, lists:sublist(Stack, 6)}],
              stats => #{}}
    end.

%% @doc A uniform integer in 1..N from the simulator's random state.
-spec uniform(pos_integer(), map()) -> {pos_integer(), map()}.
uniform(N, S = #{rand := R}) -> {X, R1} = rand:uniform_s(N, R), {X, S#{rand := R1}}.

%% @doc True with probability `P'.
-spec coin(float(), map()) -> {boolean(), map()}.
coin(P, S = #{rand := R}) -> {U, R1} = rand:uniform_s(R), {U < P, S#{rand := R1}}.

%% @doc Schedule event `Ev' `Delay' simulated ms from now (or at time `T': schedule_at/3).
-spec schedule(non_neg_integer(), term(), map()) -> map().
schedule(Delay, Ev, S = #{now := Now}) -> schedule_at(Now + Delay, Ev, S).

-spec schedule_at(non_neg_integer(), term(), map()) -> map().
schedule_at(T, Ev, S = #{q := Q, seq := Seq}) ->
    S#{q := gb_trees:insert({T, Seq}, Ev, Q), seq := Seq + 1}.

%% @doc Add 1 (or `N') to statistic `K'.
-spec bump(term(), map()) -> map().
bump(K, S) -> bump(K, 1, S).
-spec bump(term(), integer(), map()) -> map().
bump(K, N, S = #{stats := St}) -> S#{stats := St#{K => maps:get(K, St, 0) + N}}.

%% @doc Run every event scheduled up to simulated time `T'.
-spec run_until(non_neg_integer(), map()) -> map().
run_until(T, S = #{q := Q}) ->
    case gb_trees:is_empty(Q) of
        true -> S#{now := T};
        false ->
            case gb_trees:smallest(Q) of
                {{At, _}, _} when At > T -> S#{now := T};
                {{At, _} = K, Ev} ->
                    S0 = S#{now := At, q := gb_trees:delete(K, Q)},
                    S1 = case Ev of
                             {deliver, From, To, _, _} -> in_flight(From, To, -1, S0);
                             _ -> S0
                         end,
                    run_until(T, event(Ev, S1))
            end
    end.

event(Ev, S = #{driver := D}) -> D:event(Ev, S).

%%% ================================================================ network

%% @doc Whether node `Nd' is up (its replica is a map, not `{down, ...}').
-spec up(node(), map()) -> boolean().
up(Nd, #{reps := Reps}) ->
    case maps:get(Nd, Reps) of
        {down, _, _} -> false;
        out -> false;
        _ -> true
    end.

%% @doc Whether the current partition lets `A' and `B' talk.
-spec connected(node(), node(), map()) -> boolean().
connected(A, A, _) -> true;
connected(_, _, #{groups := all}) -> true;
connected(A, B, #{groups := Gs}) -> same_side(A, B, Gs).

%% Whether `A' and `B' are in one of the groups of a partition.
same_side(A, B, Groups) ->
    lists:any(fun(G) -> lists:member(A, G) andalso lists:member(B, G) end, Groups).

%% @doc The other nodes that are up and connected to `Nd'.
-spec reachable(node(), map()) -> [node()].
reachable(Nd, S = #{nodes := Nodes}) ->
    [M || M <- Nodes, M =/= Nd, up(M, S), connected(Nd, M, S)].

%% @doc Whether a message sent from `From' to `To' on connection `Epoch' arrives now: Erlang
%% distribution, a message lives only as long as the connection it was sent on.
-spec deliverable(node(), node(), non_neg_integer(), map()) -> boolean().
deliverable(From, To, Epoch, S) ->
    up(To, S) andalso connected(From, To, S) andalso epoch(From, To, S) =:= Epoch.

%% @doc A message sent from `From' on connection `Epoch' arrives at `To': `Receive(From, To,
%% Msg, S)' when it gets through, kept in the connection's buffers across a silent cut, lost
%% with a connection that broke.
-spec deliver(node(), node(), tuple(), non_neg_integer(),
              fun((node(), node(), tuple(), map()) -> map()), map()) -> map().
deliver(From, To, Msg, Epoch, Receive, S) ->
    %% Erlang distribution: a message lives only as long as the connection it was sent on
    case deliverable(From, To, Epoch, S) of
        false -> bump(dropped_cut, S);
        true ->
            case passes(From, To, S) of
                true -> Receive(From, To, Msg, S);
                false -> hold(From, To, Msg, Epoch, S)
            end
    end.

%% @doc The network's trace actions: a partition (`{partition, Shape, Groups}'), a silent one
%% (`{silent, Shape, Groups}'), a heal (`heal', or `{heal, Lags}' with the connections that
%% stay silent a while).
-spec network_action(term(), map()) -> map().
network_action({partition, Shape, Groups}, S) ->
    bump({partition, Shape}, reconnect(S#{groups := Groups}, S));
network_action({silent, Shape, Groups}, S = #{now := Now}) ->
    N = maps:get(silent_n, S, 0) + 1,
    S1 = release(S#{silent => Groups, silent_n => N}),
    bump({silent, Shape}, schedule_at(Now + ?SILENT_NOTICED_MS, {silent_noticed, N}, S1));
network_action(heal, S) ->
    network_action({heal, []}, S);
network_action({heal, Lags}, S = #{now := Now}) ->
    %% the connections of `Lags' stay silent `Ms' more
    S1 = lists:foldl(fun({A, B, Ms}, Acc) ->
                             L = maps:get(lagging, Acc, #{}),
                             schedule(Ms, {link_back, A, B},
                                      Acc#{lagging => L#{{A, B} => Now + Ms, {B, A} => Now + Ms}})
                     end, S, Lags),
    reconnect((release(S1#{silent => all}))#{groups := all}, S).

%% @doc Pairs connected now (`S1a') and not before (`S0') get a nodeup both ways; links
%% the new partition cuts lose what is in flight on them.
-spec reconnect(map(), map()) -> map().
reconnect(S1a, S0 = #{nodes := Nodes}) ->
    %% links cut by the new partition lose what was in flight on them
    Cut = [{A, B} || A <- Nodes, B <- Nodes, A < B, connected(A, B, S0),
                     not connected(A, B, S1a)],
    S1 = lists:foldl(fun({A, B}, Acc) -> nodedown(A, B, nodedown(B, A, new_epoch(A, B, Acc)))
                     end, S1a, Cut),
    New = [{A, B} || A <- Nodes, B <- Nodes, A < B, up(A, S1), up(B, S1),
                     connected(A, B, S1), not connected(A, B, S0)],
    lists:foldl(fun({A, B}, Acc) -> nodeup(A, B, nodeup(B, A, Acc)) end, S1, New).

%% Connection epochs: every time the link between two nodes breaks (a cut, a crash of either
%% end), messages sent on it before are lost, as with Erlang distribution (a node's new
%% connection, or new incarnation, never receives the old one's traffic).
link_key(A, B) when A =< B -> {A, B};
link_key(A, B) -> {B, A}.

%% @doc The current connection epoch of the link between `A' and `B'; new_epoch/3 breaks it.
-spec epoch(node(), node(), map()) -> non_neg_integer().
epoch(A, B, #{epochs := E}) -> maps:get(link_key(A, B), E, 0).

-spec new_epoch(node(), node(), map()) -> map().
new_epoch(A, B, S = #{epochs := E}) ->
    L = link_key(A, B),
    S#{epochs := E#{L => maps:get(L, E, 0) + 1}}.

nodeup(At, Peer, S = #{driver := D}) -> D:nodeup(At, Peer, S).

%% `At' sees `Peer' go down (a cut, or Peer crashed): the driver's `nodedown/3' when it has
%% one (the runtime's nodedown for a table copy); other drivers take no notice.
nodedown(At, Peer, S = #{driver := D}) ->
    case erlang:function_exported(D, nodedown, 3) of
        true -> D:nodedown(At, Peer, S);
        false -> S
    end.

%% A state that left out the keys its receivers have (hm_ec_table:merge_state/2), counted:
%% hm_sim_tests checks that the runs take that path.
left_out({merge, #{rows := {left_out, _, _}}}, S) -> bump(left_out_states, S);
left_out(_, S) -> S.

%% @doc Send `[{To, Msg}]' from `From' through the faulty network (drop, duplicate, delay).
-spec send_all(node(), [{node(), tuple()}], map()) -> map().
send_all(From, Out, S) -> lists:foldl(fun({To, Msg}, Acc) -> send(From, To, Msg, Acc) end,
                                      S, Out).

send(From, To, Msg, S0 = #{cfg := Cfg}) ->
    S = left_out(Msg, bump({msg, element(1, Msg)}, bump(msgs, wire_bytes(Msg, Cfg, S0)))),
    case connected(From, To, S) of
        false -> bump(dropped_cut, S);
        true ->
            %% a state waits for room, as the runtime's table process sends it
            case not hm_ec_wire:is_state_transfer(Msg) andalso busy(From, To, S) of
                true -> bump({dropped_busy, element(1, Msg)}, bump(dropped_busy, S));
                false ->
                    case passes(From, To, S) of
                        true -> send_now(From, To, Msg, S);
                        false -> hold(From, To, Msg, epoch(From, To, S), S)
                    end
            end
    end.

send_now(From, To, Msg, S = #{cfg := #{drop := PD, dup := PU, delay := Max}, faults := F}) ->
    {Drop, S1} = case F of true -> coin(PD, S); false -> {false, S} end,
    case Drop of
        true -> bump(dropped, S1);
        false ->
            {D1, S2} = uniform(Max, S1),
            E = epoch(From, To, S2),
            S3 = schedule(D1, {deliver, From, To, Msg, E}, in_flight(From, To, 1, S2)),
            {Dup, S4} = case F of true -> coin(PU, S3); false -> {false, S3} end,
            case Dup of
                false -> S4;
                true ->
                    {D2, S5} = uniform(Max, S4),
                    bump(duplicated, schedule(D2, {deliver, From, To, Msg, E},
                                              in_flight(From, To, 1, S5)))
            end
    end.

%%% ---------------------------------------------------------------- silent cuts

%% Whether a message from `A' gets through to `B' now: not across a silent cut (option
%% `silent'), where the nodes stay connected, nor on a connection still silent after the
%% heal.
passes(A, A, _) -> true;
passes(A, B, S) ->
    case maps:get(lagging, S, #{}) of
        #{{A, B} := _} -> false;
        _ ->
            case maps:get(silent, S, all) of
                all -> true;
                Gs -> same_side(A, B, Gs)
            end
    end.

%% A message waits in the buffers of a silently cut connection, counted in flight; beyond
%% the link's `link_cap' (busy/3, already) or ?SILENT_BUFFER, it is dropped, as `nosuspend'
%% drops it; a state waits for room.
hold(From, To, Msg, Epoch, S) ->
    Held = maps:get(held, S, #{}),
    Ms = maps:get({From, To}, Held, []),
    case length(Ms) >= ?SILENT_BUFFER andalso not hm_ec_wire:is_state_transfer(Msg) of
        true -> bump({dropped_busy, element(1, Msg)}, bump(dropped_busy, S));
        false ->
            S1 = S#{held => Held#{{From, To} => [{Msg, Epoch} | Ms]}},
            bump(held_silent, in_flight(From, To, 1, S1))
    end.

%% The messages held on links that let them through now go on, in the order they were sent,
%% from a tick on, a millisecond apart (TCP's retransmission timer, backed off during the
%% cut, fires again); still counted in flight.
release(S) ->
    {Go, Stay} = lists:partition(fun({{From, To}, _}) -> passes(From, To, S) end,
                                 maps:to_list(maps:get(held, S, #{}))),
    lists:foldl(fun({{From, To}, Ms}, Acc) ->
                        element(2, lists:foldl(
                                     fun({Msg, E}, {D, Sx}) ->
                                             {D + 1, schedule(D, {deliver, From, To, Msg, E}, Sx)}
                                     end, {?TICK, Acc}, lists:reverse(Ms)))
                end, S#{held => maps:from_list(Stay)}, Go).

%% @doc The events of silent cuts (option `silent'): the tick time runs out on a cut
%% (`{silent_noticed, N}'), a connection silent after the heal carries traffic again
%% (`{link_back, A, B}').
-spec silent_event(term(), map()) -> map().
silent_event({silent_noticed, N}, S = #{silent_n := N, silent := Groups}) when Groups =/= all ->
    %% the tick time ran out: the nodes see the cut, and what waited is lost
    Held = maps:get(held, S, #{}),
    S1 = maps:fold(fun({From, To}, Ms, Acc) ->
                           bump(dropped_cut, length(Ms), in_flight(From, To, -length(Ms), Acc))
                   end, S#{held => #{}, silent := all, lagging => #{}}, Held),
    bump(silent_noticed, reconnect(S1#{groups := Groups}, S1));
silent_event({silent_noticed, _}, S) ->
    S;
silent_event({link_back, A, B}, S = #{now := Now}) ->
    %% a connection silent after the heal carries traffic again (unless a later heal made
    %% it lag longer)
    L = maps:get(lagging, S, #{}),
    case L of
        #{{A, B} := Until} when Until =< Now ->
            bump(silent_lagged, release(S#{lagging => maps:without([{A, B}, {B, A}], L)}));
        _ -> S
    end.

%% With option `bytes': the bytes every message sent takes in the external term format (what
%% Erlang distribution carries, before its atom cache).
wire_bytes(Msg, #{bytes := true}, S) -> bump(bytes, byte_size(term_to_binary(Msg)), S);
wire_bytes(_, _, S) -> S.

%% A link with `link_cap' messages in flight is busy: a message sent on it now is dropped, as
%% Erlang distribution does with `nosuspend' when the connection's buffer is full.
busy(From, To, #{cfg := #{link_cap := Cap}} = S) ->
    maps:get({From, To}, maps:get(in_flight, S, #{}), 0) >= Cap;
busy(_, _, _) -> false.

in_flight(From, To, D, S = #{cfg := #{link_cap := _}}) ->
    F = maps:get(in_flight, S, #{}),
    S#{in_flight => F#{{From, To} => maps:get({From, To}, F, 0) + D}};
in_flight(_, _, _, S) -> S.

%%% ================================================================ checkers 3 and 4

%% @doc Record a checker failure (at most 20 a run).
-spec fail(term(), map()) -> map().
fail(What, S = #{failures := Fs, now := Now}) when length(Fs) < 20 ->
    S#{failures := Fs ++ [{Now, What}]};
fail(_, S) -> S.

%% @doc Checkers 3 (causal delivery: `{applied, Msg}') and 4 (stability safety:
%% `{stabilized, Dots}') on the events of replica `Nd'; `{installed, V}' sets its vector.
-spec events(node(), [hm_ec_table:event()], map()) -> map().
events(Nd, Evs, S) -> lists:foldl(fun(E, Acc) -> ev(Nd, E, Acc) end, S, Evs).

ev(Nd, {applied, {O, Ts, _}}, S = #{applied := Ap, ops := Ops}) ->
    A = maps:get(Nd, Ap),
    Seq = maps:get(O, Ts),
    Ok = Seq =:= hm_vv:get(O, A) + 1 andalso
        lists:all(fun({R, C}) -> R =:= O orelse C =< hm_vv:get(R, A) end, maps:to_list(Ts)),
    S1 = case Ok of
             true -> S;
             false -> fail({causal_delivery, Nd, {O, Seq}, Ts, {delivered_before, A}}, S)
         end,
    Dot = {O, Seq},
    Ops1 = case Ops of
               #{Dot := I = #{holders := H}} -> Ops#{Dot := I#{holders := lists:usort([Nd | H])}};
               _ -> Ops
           end,
    S1#{applied := Ap#{Nd := A#{O => max(Seq, hm_vv:get(O, A))}}, ops := Ops1};
ev(Nd, {installed, V}, S = #{applied := Ap, ops := Ops}) ->
    bump(installs, S#{applied := Ap#{Nd := V}, ops := holds(Nd, V, Ops)});
ev(Nd, {merged, V}, S = #{applied := Ap, ops := Ops}) ->
    %% caught up by state: what the member delivered counts as delivered here too
    bump(merges, S#{applied := Ap#{Nd := hm_vv:join(maps:get(Nd, Ap), V)},
                    ops := holds(Nd, V, Ops)});
ev(_Nd, {stabilized, []}, S) -> S;
ev(Nd, {stabilized, Dots}, S = #{nodes := Nodes, reps := Reps, applied := Ap}) ->
    Judges = [M || M <- Nodes, M =/= Nd,
                   case maps:get(M, Reps) of
                       {down, _, Stateful} -> Stateful;
                       R -> ready(R)
                   end],
    Bad = [{Dot, M} || Dot <- Dots, M <- Judges, not hm_vv:contains(Dot, maps:get(M, Ap))],
    case Bad of
        [] -> bump(stabilized_dots, length(Dots), S);
        _ -> fail({unsafe_stability, Nd, {not_delivered_by, lists:sublist(Bad, 5)}}, S)
    end.

%% Copy `Nd' holds every operation `V' covers (a state it installed or joined).
holds(Nd, V, Ops) ->
    maps:map(fun(Dot, I = #{holders := H}) ->
                     case hm_vv:contains(Dot, V) of
                         true -> I#{holders := lists:usort([Nd | H])};
                         false -> I
                     end
             end, Ops).

%% A replica that counts for checker 4: a table copy, or a CRDT driver's replica (a map).
ready(#{status := St}) -> St =:= ready;
ready(R) -> hm_ec_table:status(R) =:= ready.

%% @doc The members' replicas, in the order of the members.
-spec reps(map()) -> [term()].
reps(#{reps := Reps, nodes := Nodes}) -> [maps:get(N, Reps) || N <- Nodes].

%% @doc Checker 1 on copies of the runtime's table core ({@link hm_ec_table}): every one up
%% and ready, with the same delivered vector, and showing the same `View(Copy)' (its rows,
%% or a CRDT table's values).
-spec copies_converged([term()], fun((hm_ec_table:state()) -> term())) -> boolean().
copies_converged(Copies, View) ->
    lists:all(fun(R) -> is_tuple(R) andalso element(1, R) =/= down
                            andalso hm_ec_table:status(R) =:= ready end, Copies) andalso
        hm_check:converged([hm_tcsb:delivered(hm_ec_table:tcsb(R)) || R <- Copies]) andalso
        hm_check:converged([View(R) || R <- Copies]).

%%% ================================================================ the end of a run

%% @doc The end of the work phase: heal every partition, turn random faults off, restart
%% every crashed replica.
-spec final_heal(map()) -> map().
final_heal(S = #{nodes := Nodes, reps := Reps}) ->
    S0 = release(S#{silent => all, lagging => #{}}),
    S1 = (reconnect(S0#{groups := all}, S))#{faults := false},
    lists:foldl(fun(Nd, Acc) ->
                        case maps:get(Nd, Reps) of
                            {down, _, _} -> act({restart, Nd}, Acc);
                            _ -> Acc
                        end
                end, S1, Nodes).

act(A, S = #{driver := D}) -> D:action(A, S).

%% @doc Run tick by tick after the work phase (which ended at `Dur') until the replicas are
%% quiescent or for at most 60 simulated s; records `converged_ms' and `quiesced_ms'.
-spec quiesce(non_neg_integer(), map()) -> map().
quiesce(Dur, S) -> quiesce(Dur, Dur + ?TICK, S).

quiesce(Dur, T, S) ->
    S1 = run_until(T, S),
    _ = trace_quiesce(T - Dur, S1),
    S2 = case {maps:is_key(converged_ms, maps:get(stats, S1)), check(converged, S1)} of
             {false, true} -> (bump(converged_ms, T - Dur, S1));
             _ -> S1
         end,
    case check(quiescent, S2) orelse T - Dur >= ?QUIESCE_CAP of
        true -> S2#{quiesced_ms => T - Dur};
        false -> quiesce(Dur, T + ?TICK, S2)
    end.

%% With option `trace_quiesce', the driver's `trace_quiesce/2' when it has one.
trace_quiesce(Ms, S = #{driver := D}) ->
    case erlang:function_exported(D, trace_quiesce, 2) of
        true -> D:trace_quiesce(Ms, S);
        false -> ok
    end.

check(F, S = #{driver := D}) -> D:F(S).

%%% ================================================================ minimisation

%% @doc {@link minimise/3} for any runner of traces (a `fun(Trace) -> result()').
-spec minimise_with(fun(([action()]) -> #{ok := boolean(), _ => _}), [action()],
                    pos_integer()) -> [action()].
minimise_with(Run, Trace, Budget) -> min_loop(Run, Trace, 1, Budget).

min_loop(_, Trace, I, B) when I > length(Trace); B =< 0 -> Trace;
min_loop(Run, Trace, I, B) ->
    {Pre, [Act | Post]} = lists:split(I - 1, Trace),
    Smaller = Pre ++ (Post -- partner(Act, Post)),
    case maps:get(ok, Run(Smaller)) of
        false -> min_loop(Run, Smaller, I, B - 1);
        true -> min_loop(Run, Trace, I + 1, B - 1)
    end.

%% a fault's closing action goes with it
partner({_, {crash, N}}, Post) ->
    case [A || A = {_, {restart, M}} <- Post, M =:= N] of [A | _] -> [A]; [] -> [] end;
partner({_, {mnesia_stop, N}}, Post) ->
    case [A || A = {_, {mnesia_start, M}} <- Post, M =:= N] of [A | _] -> [A]; [] -> [] end;
partner({_, {Cut, _, _}}, Post) when Cut =:= partition; Cut =:= silent ->
    case [A || A = {_, H} <- Post, H =:= heal orelse is_tuple(H) andalso element(1, H) =:= heal]
    of
        [A | _] -> [A];
        [] -> []
    end;
partner(_, _) -> [].

%% @doc A failing schedule: minimise its trace with `Run', write `Saved(Minimised)' to `File'
%% (what `make sim SEED=S TRACE=File' replays) and print both runs' failures.
-spec print_minimised(string(), integer(), iodata(), fun(([action()]) -> result()), [action()],
                      [term()], string(), fun(([action()]) -> term())) -> ok.
print_minimised(What, Seed, Desc, Run, Trace, Fs, File, Saved) ->
    Min = minimise_with(Run, Trace, 150),
    ok = filelib:ensure_dir(File),
    ok = file:write_file(File, io_lib:format("~p.~n", [Saved(Min)])),
    #{failures := MinFs} = Run(Min),
    io:format("FAILED ~s ~p (~s): ~P~n"
              "  minimised trace (~p of ~p actions, replay: make sim SEED=~p TRACE=~s):~n"
              "  ~p~n  failures of the minimised trace: ~P~n",
              [What, Seed, Desc, Fs, 40, length(Min), length(Trace), Seed, File, Min,
               MinFs, 60]).

%%% ================================================================ campaign totals

%% @doc Add a run's integer statistics to the totals (max for `max_timestamps').
-spec totals(map(), map()) -> map().
totals(St, Tot) ->
    maps:fold(fun(quiesced_ms, V, Acc) ->
                      Acc#{quiesced_ms => maps:get(quiesced_ms, Acc, 0) + V,
                           max_quiesced_ms => max(V, maps:get(max_quiesced_ms, Acc, 0))};
                 (K, V, Acc) when is_integer(V), K =/= hash, K =/= max_timestamps ->
                      Acc#{K => maps:get(K, Acc, 0) + V};
                 (max_timestamps, V, Acc) -> Acc#{max_timestamps => max(V, maps:get(max_timestamps, Acc, 0))};
                 (_, _, Acc) -> Acc
              end, Tot, St).

%% @doc The faults of campaign totals, as one line.
-spec fault_line(map()) -> iolist().
fault_line(T) ->
    Parts = [{"partitions", lists:sum([V || {{partition, _}, V} <- maps:to_list(T)])},
             {"crashes", maps:get(crashes, T, 0)}, {"restarts", maps:get(restarts, T, 0)},
             {"dropped", maps:get(dropped, T, 0)}, {"duplicated", maps:get(duplicated, T, 0)},
             {"cut", maps:get(dropped_cut, T, 0)}, {"snapshots", maps:get(installs, T, 0)},
             {"ops lost with a ram crash", maps:get(lost_with_ram_crash, T, 0)}],
    string:join([io_lib:format("~s ~p", [K, V]) || {K, V} <- Parts], ", ").
