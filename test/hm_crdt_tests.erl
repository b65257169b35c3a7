%% @doc EUnit examples of the hm_crdt facade: every documented error, and the map type's
%% semantics (reset-remove, nesting) in each flavor.
-module(hm_crdt_tests).
-include_lib("eunit/include/eunit.hrl").

flavors() -> [state, delta, op].

%% Mutate at `R'; return the new CRDT and the event.
mut(Op, R, C) ->
    {ok, C1, Ev} = hm_crdt:mutate(Op, R, C),
    {C1, Ev}.

%%% ------------------------------------------------------------- errors

new_errors_test_() ->
    [?_assertEqual({error, {unknown_type, nope}}, hm_crdt:new(nope, state)),
     ?_assertEqual({error, {unknown_flavor, cmrdt}}, hm_crdt:new(awset, cmrdt)),
     ?_assertEqual({error, {unknown_type, "awset"}}, hm_crdt:new("awset", op))].

mutate_errors_test_() ->
    [[?_assertEqual({error, {bad_op, awset, {put, x}}},
                    hm_crdt:mutate({put, x}, a, hm_crdt:new(awset, F))),
      ?_assertEqual({error, {bad_op, awset, {add_all, [a | b]}}},
                    hm_crdt:mutate({add_all, [a | b]}, a, hm_crdt:new(awset, F))),
      ?_assertEqual({error, {bad_op, map, {update, k, nope, x}}},
                    hm_crdt:mutate({update, k, nope, x}, a, hm_crdt:new(map, F))),
      ?_assertEqual({error, {bad_op, map, {update, k, gcounter, decrement}}},
                    hm_crdt:mutate({update, k, gcounter, decrement}, a, hm_crdt:new(map, F))),
      ?_assertEqual({error, {bad_replica, self()}},
                    hm_crdt:mutate({add, x}, self(), hm_crdt:new(awset, F)))]
     || F <- flavors()] ++
    [?_assertEqual({error, {bad_crdt, not_a_crdt}}, hm_crdt:mutate({add, x}, a, not_a_crdt))].

deliver_errors_test_() ->
    [[?_assertMatch({error, {bad_event, _}}, hm_crdt:deliver(garbage, hm_crdt:new(awset, F))),
      %% an event of another type is refused, not applied
      ?_assertMatch({error, {bad_event, _}},
                    hm_crdt:deliver(element(2, mut(increment, a, hm_crdt:new(gcounter, F))),
                                    hm_crdt:new(awset, F)))]
     || F <- flavors()] ++
    [%% a malformed op never reaches the buffer, so it cannot block good events behind it
     ?_assertMatch({error, {bad_event, _}},
                   hm_crdt:deliver({hm_event, op, awset, {b, #{b => 2}, {put, x}}},
                                   hm_crdt:new(awset, op))),
     ?_assertMatch({error, {bad_event, _}},
                   hm_crdt:deliver({hm_event, op, awset, {b, #{b => 0}, {add, x}}},
                                   hm_crdt:new(awset, op))),
     ?_assertEqual({error, {bad_crdt, x}}, hm_crdt:deliver(garbage, x))].

merge_errors_test_() ->
    [?_assertEqual({error, {not_supported, merge, op}},
                   hm_crdt:merge(hm_crdt:new(awset, op), hm_crdt:new(awset, op))),
     ?_assertEqual({error, {type_mismatch, {awset, state}, {rwset, state}}},
                   hm_crdt:merge(hm_crdt:new(awset, state), hm_crdt:new(rwset, state))),
     ?_assertEqual({error, {type_mismatch, {awset, state}, {awset, delta}}},
                   hm_crdt:merge(hm_crdt:new(awset, state), hm_crdt:new(awset, delta))),
     ?_assertEqual({error, {bad_crdt, x}}, hm_crdt:merge(hm_crdt:new(awset, state), x))].

binary_errors_test_() ->
    Bin = hm_crdt:to_binary(element(1, mut({add, x}, a, hm_crdt:new(awset, op)))),
    <<Magic:4/binary, _Vsn, Rest/binary>> = Bin,
    <<Head:10/binary, B, Tail/binary>> = Bin,
    [?_assertEqual({error, bad_binary}, hm_crdt:from_binary(<<>>)),
     ?_assertEqual({error, bad_binary}, hm_crdt:from_binary(<<"not a crdt">>)),
     ?_assertEqual({error, {bad_version, 9}}, hm_crdt:from_binary(<<Magic/binary, 9, Rest/binary>>)),
     ?_assertEqual({error, bad_checksum},
                   hm_crdt:from_binary(<<Head/binary, (B bxor 1), Tail/binary>>)),
     ?_assertMatch({ok, _}, hm_crdt:from_binary(Bin))].

stable_is_noop_for_lattices_test_() ->
    [?_assertEqual(C, hm_crdt:stable(#{a => 1}, C))
     || F <- [state, delta], C <- [element(1, mut({add, x}, a, hm_crdt:new(awset, F)))]].

%%% ------------------------------------------------------------- map semantics

%% a increments k by 5; b sees it and removes k; concurrently a increments k by 1.
%% Reset-remove: only the concurrent increment survives, in every flavor.
map_counter_reset_test_() ->
    [{atom_to_list(F), fun() -> counter_reset(F) end} || F <- flavors()].

counter_reset(F) ->
    A0 = hm_crdt:new(map, F), B0 = hm_crdt:new(map, F),
    {A1, E1} = mut({update, k, gcounter, {increment, 5}}, a, A0),
    B1 = hm_crdt:deliver(E1, B0),
    {B2, E2} = mut({remove, k}, b, B1),
    {A2, E3} = mut({update, k, gcounter, increment}, a, A1),
    A3 = hm_crdt:deliver(E2, A2),
    B3 = hm_crdt:deliver(E3, B2),
    ?assertEqual([{k, gcounter, 1}], hm_crdt:value(A3)),
    ?assertEqual([{k, gcounter, 1}], hm_crdt:value(B3)),
    %% a later increment, after everything was seen, counts from there
    {A4, _} = mut({update, k, gcounter, increment}, a, A3),
    ?assertEqual([{k, gcounter, 2}], hm_crdt:value(A4)).

%% An update concurrent with a remove keeps the field (add-wins fields), with only what the
%% remove did not see.
map_add_wins_field_test_() ->
    [{atom_to_list(F), fun() -> add_wins_field(F) end} || F <- flavors()].

add_wins_field(F) ->
    {A1, E1} = mut({update, s, awset, {add, x}}, a, hm_crdt:new(map, F)),
    B1 = hm_crdt:deliver(E1, hm_crdt:new(map, F)),
    {B2, E2} = mut({remove, s}, b, B1),
    {A2, E3} = mut({update, s, awset, {add, y}}, a, A1),
    ?assertEqual([], hm_crdt:value(B2)),
    ?assertEqual([{s, awset, [y]}], hm_crdt:value(hm_crdt:deliver(E2, A2))),
    ?assertEqual([{s, awset, [y]}], hm_crdt:value(hm_crdt:deliver(E3, B2))).

map_nested_test_() ->
    [{atom_to_list(F), fun() -> nested(F) end} || F <- flavors()].

nested(F) ->
    C0 = hm_crdt:new(map, F),
    {C1, _} = mut({update, user, map, {update, name, lwwreg, {assign, <<"ada">>, 1}}}, a, C0),
    {C2, _} = mut({update, user, map, {update, logins, pncounter, {increment, 3}}}, a, C1),
    {C3, _} = mut({update, tags, awset, {add_all, [x, y]}}, a, C2),
    ?assertEqual([{tags, awset, [x, y]},
                  {user, map, [{logins, pncounter, 3}, {name, lwwreg, <<"ada">>}]}],
                 hm_crdt:value(C3)),
    {C4, _} = mut({update, user, map, {remove, logins}}, a, C3),
    ?assertEqual([{tags, awset, [x, y]}, {user, map, [{name, lwwreg, <<"ada">>}]}],
                 hm_crdt:value(C4)).

%% Same key, two types: two fields; a remove of the key removes both.
map_key_types_test() ->
    C0 = hm_crdt:new(map, state),
    {C1, _} = mut({update, k, gcounter, increment}, a, C0),
    {C2, _} = mut({update, k, ewflag, enable}, a, C1),
    ?assertEqual([{k, ewflag, true}, {k, gcounter, 1}], hm_crdt:value(C2)),
    {C3, _} = mut({remove, k}, a, C2),
    ?assertEqual([], hm_crdt:value(C3)).

%% Op flavor: after everything is stable, no timestamp is left anywhere in the map.
map_op_stable_test() ->
    C0 = hm_crdt:new(map, op),
    {C1, _} = mut({update, k, awset, {add, x}}, a, C0),
    {C2, _} = mut({update, n, map, {update, c, gcounter, increment}}, a, C1),
    ?assert(hm_crdt:metadata(C2) > 0),
    C3 = hm_crdt:stable(hm_crdt:delivered(C2), C2),
    ?assertEqual(0, hm_crdt:metadata(C3)),
    ?assertEqual(hm_crdt:value(C2), hm_crdt:value(C3)).

%%% ------------------------------------------------------------- causal delivery in the facade

%% Op and delta flavors accept events in any order and any number of times.
out_of_order_test_() ->
    [{atom_to_list(F), fun() -> out_of_order(F) end} || F <- [delta, op]].

out_of_order(F) ->
    {A1, E1} = mut({add, x}, a, hm_crdt:new(awset, F)),
    {_, E2} = mut({remove, x}, a, A1),
    B0 = hm_crdt:new(awset, F),
    B1 = hm_crdt:deliver(E2, B0),                  % the remove first: buffered
    ?assertEqual(1, hm_crdt:pending(B1)),
    ?assertEqual([], hm_crdt:value(B1)),
    B2 = hm_crdt:deliver(E1, B1),                  % then the add: both delivered, in order
    ?assertEqual(0, hm_crdt:pending(B2)),
    ?assertEqual([], hm_crdt:value(B2)),
    ?assertEqual(B2, hm_crdt:deliver(E1, B2)),     % duplicates are ignored
    ?assertEqual(#{a => 2}, hm_crdt:delivered(B2)).

%%% ------------------------------------------------------------- the demo

%% The CRDT-only demo (hm_crdt_demo) converges in every flavor (EUnit captures what it prints).
demo_test_() ->
    [{atom_to_list(F), ?_assertEqual(ok, hm_crdt_demo:run(F))} || F <- flavors()].

%% drop_pending/2: a delta (or op) event of a gone origin, waiting for one that died with it,
%% is forgotten; one of a live origin stays buffered; the state flavor has nothing buffered.
drop_pending_test() ->
    {ok, A1, _E1} = hm_crdt:mutate({add, x}, {a, 1}, hm_crdt:new(awset, delta)),
    {ok, _A2, E2} = hm_crdt:mutate({add, y}, {a, 1}, A1),         % E1 never arrives
    {ok, B1, _} = hm_crdt:mutate({add, z}, {b, 1}, hm_crdt:new(awset, delta)),
    {ok, _, F2} = hm_crdt:mutate({add, w}, {b, 1}, B1),
    C = hm_crdt:deliver(F2, hm_crdt:deliver(E2, hm_crdt:new(awset, delta))),
    ?assertEqual(2, hm_crdt:pending(C)),
    C1 = hm_crdt:drop_pending(fun(O) -> O =:= {a, 1} end, C),
    ?assertEqual(1, hm_crdt:pending(C1)),
    ?assertEqual(hm_crdt:value(C), hm_crdt:value(C1)),
    S = hm_crdt:new(awset, state),
    ?assertEqual(S, hm_crdt:drop_pending(fun(_) -> true end, S)).

