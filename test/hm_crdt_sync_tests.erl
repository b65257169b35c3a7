%% @doc EUnit tests of {@link hm_crdt_sync} on two or three replicas of one CRDT: lost deltas
%% are resent until acknowledged, a peer missing another origin's update gets the full state,
%% acknowledged deltas are dropped, state gossip converges. (The simulator's CRDT workloads
%% run the same module under random faults: hm_sim_crdt_tests.)
-module(hm_crdt_sync_tests).
-include_lib("eunit/include/eunit.hrl").

rep(Flavor, Node) ->
    #{node => Node, c => hm_crdt:new(awset, Flavor),
      y => hm_crdt_sync:new(Flavor, {Node, 1})}.

mutate(Op, R = #{node := N, c := C, y := Y}, Up) ->
    {ok, C1, Ev} = hm_crdt:mutate(Op, {N, 1}, C),
    {Y1, Out} = hm_crdt_sync:local(Ev, C1, Up, Y),
    {R#{c := C1, y := Y1}, Out}.

recv(Msg, R = #{c := C, y := Y}) ->
    {C1, Y1, []} = hm_crdt_sync:handle(Msg, C, Y),
    R#{c := C1, y := Y1}.

tick(R = #{node := N, c := C, y := Y}, Up, Members) ->
    {Y1, Out, _} = hm_crdt_sync:tick(N, Up, Members, none, {C, Y}),
    {R#{y := Y1}, Out}.

%% Deliver every message of `Out' to its addressee in `Reps'.
deliver(Out, Reps) ->
    lists:foldl(fun({To, Msg}, Acc) -> Acc#{To := recv(Msg, maps:get(To, Acc))} end, Reps, Out).

%% Ticks on every replica and deliveries until nothing is sent but acknowledgements.
rounds(Reps, 0) -> Reps;
rounds(Reps, K) ->
    Members = maps:keys(Reps),
    {Reps1, Out} = lists:foldl(fun(N, {Acc, O}) ->
                                       {R1, O1} = tick(maps:get(N, Acc), Members -- [N], Members),
                                       {Acc#{N := R1}, O ++ O1}
                               end, {Reps, []}, Members),
    rounds(deliver(Out, Reps1), K - 1).

value(R) -> hm_crdt:value(maps:get(c, R)).

lost_delta_resent_and_dropped_test() ->
    Reps0 = #{a => rep(delta, a), b => rep(delta, b)},
    {A1, _Lost} = mutate({add, x}, maps:get(a, Reps0), [b]),
    {A2, Out} = mutate({add, y}, A1, [b]),
    %% the first delta is lost, the second arrives: b buffers it (it depends on the first)
    Reps1 = deliver(Out, Reps0#{a := A2}),
    ?assertEqual([], value(maps:get(b, Reps1))),
    Reps2 = rounds(Reps1, 5),
    ?assertEqual([x, y], value(maps:get(b, Reps2))),
    %% every member acknowledged a's deltas: none kept
    ?assertEqual([], hm_crdt_sync:deltas(maps:get(y, maps:get(a, Reps2)))),
    ?assertEqual(#{crdt_pending => 0, deltas => 0},
                 hm_crdt_sync:leftovers(maps:get(c, maps:get(b, Reps2)),
                                        maps:get(y, maps:get(b, Reps2)))).

full_state_for_another_origins_update_test() ->
    %% c's update reaches a only; a cannot resend it as a delta (not its own): b gets a's
    %% full state once it lags for two ticks
    Reps0 = #{a => rep(delta, a), b => rep(delta, b), c => rep(delta, c)},
    {C1, Out} = mutate({add, z}, maps:get(c, Reps0), [a]),
    Reps1 = deliver(Out, Reps0#{c := C1}),
    {C2, Ys} = {maps:get(c, Reps1), [maps:get(y, R) || R <- maps:values(Reps1)]},
    ?assertEqual(3, length(Ys)),
    %% c is gone from now on: only a and b tick
    Reps2 = rounds(maps:remove(c, Reps1), 4),
    ?assertEqual([z], value(maps:get(b, Reps2))),
    ?assertEqual([z], value(C2)).

state_gossip_test() ->
    A0 = rep(state, a), B0 = rep(state, b),
    {A1, _} = mutate({add, x}, A0, []),                 % nobody reachable
    {B1, _} = mutate({add, y}, B0, []),
    {_, [{b, Full}], 1} = hm_crdt_sync:tick(a, [b], [a, b], b, {maps:get(c, A1), maps:get(y, A1)}),
    B2 = recv(Full, B1),
    ?assertEqual([x, y], value(B2)),
    {_, [{a, Full2}]} = hm_crdt_sync:nodeup(a, maps:get(c, B2), maps:get(y, B2)),
    ?assertEqual([x, y], value(recv(Full2, A1))).
