%% @doc EUnit examples for hm_gcounter and hm_pncounter in every flavor.
-module(hm_counters_tests).
-include_lib("eunit/include/eunit.hrl").

%% Apply ops at replicas of one CRDT, return it.
run(C0, Ops) ->
    lists:foldl(fun({R, Op}, C) -> {ok, C1, _} = hm_crdt:mutate(Op, R, C), C1 end, C0, Ops).

values_test_() ->
    [[{atom_to_list(F), ?_assertEqual(0, hm_crdt:value(hm_crdt:new(gcounter, F)))},
      {atom_to_list(F), ?_assertEqual(0, hm_crdt:value(hm_crdt:new(pncounter, F)))},
      {atom_to_list(F),
       ?_assertEqual(6, hm_crdt:value(run(hm_crdt:new(gcounter, F),
                                          [{a, increment}, {a, {increment, 3}},
                                           {b, increment}, {a, {increment, 0}},
                                           {b, increment}])))},
      {atom_to_list(F),
       ?_assertEqual(-2, hm_crdt:value(run(hm_crdt:new(pncounter, F),
                                           [{a, increment}, {a, {decrement, 4}},
                                            {b, decrement}, {b, {increment, 3}},
                                            {a, decrement}])))}]
     || F <- hm_crdt:flavors()].

bad_ops_test_() ->
    G = [decrement, {increment, -1}, {increment, 1.0}, {increment, a}, {increment, 1, 2},
         {decrement, 1}, add, "increment"],
    P = [{increment, -1}, {decrement, -3}, {decrement, 2.5}, {decrement, x}, {add, 1},
         {decrement}, <<"decrement">>],
    [?_assertEqual({error, {bad_op, T, Op}}, hm_crdt:mutate(Op, a, hm_crdt:new(T, F)))
     || F <- hm_crdt:flavors(), {T, Ops} <- [{gcounter, G}, {pncounter, P}], Op <- Ops].

%% A single live dot per replica: the state does not grow with the number of increments.
one_dot_per_replica_test() ->
    C = run(hm_crdt:new(pncounter, state),
            [{a, increment}, {a, decrement}, {b, {increment, 5}}, {a, {increment, 2}}]),
    {Store, _} = hm_crdt:lattice(C),
    ?assertEqual(#{{a, 3} => {3, 1}, {b, 1} => {5, 0}}, Store),
    ?assertEqual(7, hm_crdt:value(C)).

%% Dropping the dots a remove has seen (what a map does) resets the counter.
dots_reset_test() ->
    C = run(hm_crdt:new(gcounter, state), [{a, {increment, 4}}, {b, increment}]),
    {_, Ctx} = hm_crdt:lattice(C),
    ?assertEqual({#{}, Ctx}, hm_dcc:join(hm_crdt:lattice(C), {#{}, Ctx})),
    ?assertEqual(0, hm_gcounter:value(#{})).

%% Op flavor: after stable/2 the PO-log is empty and the value unchanged.
op_log_empties_test_() ->
    [fun() ->
             A0 = hm_crdt:new(T, op), B0 = hm_crdt:new(T, op),
             {ok, A1, E1} = hm_crdt:mutate(increment, a, A0),
             {ok, A2, E2} = hm_crdt:mutate({increment, 2}, a, A1),
             B1 = hm_crdt:deliver(E2, B0),        % buffered until E1 arrives
             ?assertEqual(0, hm_crdt:value(B1)),
             B2 = hm_crdt:deliver(E1, B1),
             {ok, B3, E3} = hm_crdt:mutate(increment, b, B2),
             A3 = hm_crdt:deliver(E3, A2),
             [begin
                  ?assertEqual(4, hm_crdt:value(X)),
                  ?assertEqual(3, hm_crdt:metadata(X))
              end || X <- [A3, B3]],
             All = hm_crdt:delivered(A3),
             ?assertEqual(All, hm_crdt:delivered(B3)),
             %% only a's ops stable: two entries folded
             A4 = hm_crdt:stable(#{a => 2}, A3),
             ?assertEqual({4, 1}, {hm_crdt:value(A4), hm_crdt:metadata(A4)}),
             [begin
                  X1 = hm_crdt:stable(All, X),
                  ?assertEqual({4, 0}, {hm_crdt:value(X1), hm_crdt:metadata(X1)})
              end || X <- [A3, A4, B3]]
     end || T <- [gcounter, pncounter]].

%% Op flavor reset (a map's {remove, Key}): drops the stable part and the seen entries only.
op_reset_test_() ->
    [?_assertEqual({0, #{{b, 1} => 2}},
                   hm_gcounter:reset(#{a => 2}, {5, #{{a, 2} => 1, {b, 1} => 2}})),
     ?_assertEqual({0, #{{b, 1} => -2}},
                   hm_pncounter:reset(#{a => 2}, {5, #{{a, 1} => -1, {b, 1} => -2}})),
     ?_assertEqual({-1, #{{b, 1} => 3}},
                   hm_pncounter:stabilize(#{a => 5}, {1, #{{a, 1} => -2, {b, 1} => 3}}))].

%% Concurrent operations at three replicas: every flavor converges to the sum.
concurrent_test_() ->
    Cases = [{gcounter, [{a, increment}, {b, {increment, 4}}, {c, increment},
                         {c, {increment, 2}}], 8},
             {pncounter, [{a, increment}, {b, {decrement, 4}}, {c, decrement},
                          {c, {increment, 2}}, {a, {decrement, 1}}], -3}],
    [{lists:flatten(io_lib:format("~p/~p", [T, F])),
      fun() -> converge(T, F, Ops, Expected) end}
     || {T, Ops, Expected} <- Cases, F <- hm_crdt:flavors()].

converge(T, F, Ops, Expected) ->
    Rs = [a, b, c],
    %% every replica mutates on its own (concurrently), collecting its events
    {Cs, Evs} = lists:foldl(
                  fun({R, Op}, {Acc, Es}) ->
                          {ok, C1, E} = hm_crdt:mutate(Op, R, maps:get(R, Acc)),
                          {Acc#{R := C1}, [E | Es]}
                  end, {maps:from_list([{R, hm_crdt:new(T, F)} || R <- Rs]), []}, Ops),
    %% deliver every event to every replica, newest first and twice
    Final = [lists:foldl(fun(E, C) -> hm_crdt:deliver(E, C) end, maps:get(R, Cs), Evs ++ Evs)
             || R <- Rs],
    [?assertEqual(Expected, hm_crdt:value(C)) || C <- Final],
    [?assertEqual(0, hm_crdt:pending(C)) || C <- Final],
    case F of
        op -> ok;
        _ ->
            [M | _] = [lists:foldl(fun(X, Acc) -> hm_crdt:merge(Acc, X) end, C, maps:values(Cs))
                       || C <- maps:values(Cs)],
            ?assertEqual(Expected, hm_crdt:value(M)),
            [?assertEqual(hm_crdt:lattice(M), hm_crdt:lattice(C)) || C <- Final]
    end.
