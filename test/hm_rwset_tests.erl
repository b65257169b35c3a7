%% @doc Examples of the remove-wins set ({@link hm_rwset}) in every flavor, through the
%% {@link hm_crdt} facade, and of the op flavor's PO-log compaction.
-module(hm_rwset_tests).
-include_lib("eunit/include/eunit.hrl").

flavors() -> hm_crdt:flavors().

new(F) -> hm_crdt:new(rwset, F).

%% Apply an op; return the new replica and the event.
mut(Op, R, C) ->
    {ok, C1, Ev} = hm_crdt:mutate(Op, R, C),
    {C1, Ev}.

deliver(Evs, C) -> lists:foldl(fun(Ev, Acc) -> hm_crdt:deliver(Ev, Acc) end, C, Evs).

concurrent_add_remove_test_() ->
    [{atom_to_list(F),
      fun() ->
              %% a and b share x, then a adds x again while b removes it concurrently
              {A1, E1} = mut({add, x}, a, new(F)),
              B1 = deliver([E1], new(F)),
              {A2, E2} = mut({add, x}, a, A1),
              {B2, E3} = mut({remove, x}, b, B1),
              A3 = deliver([E3], A2),
              B3 = deliver([E2], B2),
              ?assertEqual([], hm_crdt:value(A3)),
              ?assertEqual([], hm_crdt:value(B3)),
              %% the same with nothing shared before
              {C1, E4} = mut({add, y}, a, new(F)),
              {D1, E5} = mut({remove, y}, b, new(F)),
              ?assertEqual([], hm_crdt:value(deliver([E5], C1))),
              ?assertEqual([], hm_crdt:value(deliver([E4], D1)))
      end} || F <- flavors()].

add_after_remove_test_() ->
    [{atom_to_list(F),
      fun() ->
              {A1, E1} = mut({add, x}, a, new(F)),
              {A2, E2} = mut({remove, x}, a, A1),
              ?assertEqual([], hm_crdt:value(A2)),
              %% b saw the remove, then adds x: causally later, so present
              B1 = deliver([E1, E2], new(F)),
              {B2, E3} = mut({add, x}, b, B1),
              A3 = deliver([E3], A2),
              ?assertEqual([x], hm_crdt:value(B2)),
              ?assertEqual([x], hm_crdt:value(A3)),
              %% locally, too
              {A4, _} = mut({add, x}, a, element(1, mut({remove, x}, a, A3))),
              ?assertEqual([x], hm_crdt:value(A4))
      end} || F <- flavors()].

add_all_remove_all_test_() ->
    [{atom_to_list(F),
      fun() ->
              {A1, E1} = mut({add_all, [c, a, b, a]}, a, new(F)),
              ?assertEqual([a, b, c], hm_crdt:value(A1)),
              {A2, E2} = mut({remove_all, [a, b, a, z]}, a, A1),
              ?assertEqual([c], hm_crdt:value(A2)),
              %% concurrent add_all and remove_all: the removed ones lose
              B1 = deliver([E1, E2], new(F)),
              {B2, E3} = mut({add_all, [a, b, d]}, b, B1),
              {A3, E4} = mut({remove_all, [b, c]}, a, A2),
              ?assertEqual([a, d], hm_crdt:value(deliver([E3], A3))),
              ?assertEqual([a, d], hm_crdt:value(deliver([E4], B2))),
              {A4, _} = mut({add_all, []}, a, A3),
              {A5, _} = mut({remove_all, []}, a, A4),
              ?assertEqual([], hm_crdt:value(A5))
      end} || F <- flavors()].

bad_ops_test_() ->
    Bad = [foo, {add}, {add, x, y}, {remove}, {add_all, notalist}, {remove_all, x},
           {add_all, [a | b]}, {remove_all, [a | b]}, {put, x}, [], <<"add">>],
    [{atom_to_list(F),
      fun() ->
              C = new(F),
              [?assertEqual({error, {bad_op, rwset, Op}}, hm_crdt:mutate(Op, a, C))
               || Op <- Bad],
              [?assertNot(hm_crdt:is_op(rwset, Op)) || Op <- Bad]
      end} || F <- flavors()].

%% Op flavor: stability compacts the log, and a removed element leaves no trace.
op_stable_empties_log_test() ->
    {A1, E1} = mut({add_all, [x, y, z]}, a, new(op)),
    B1 = deliver([E1], new(op)),
    {A2, E2} = mut({remove, x}, a, A1),
    {B2, E3} = mut({add, w}, b, B1),
    A3 = deliver([E3], A2),
    B3 = deliver([E2], B2),
    ?assertEqual([w, y, z], hm_crdt:value(A3)),
    ?assertEqual(hm_crdt:delivered(A3), hm_crdt:delivered(B3)),
    ?assertEqual(4, hm_crdt:metadata(A3)),
    All = hm_crdt:delivered(A3),
    [begin
         S = hm_crdt:stable(All, C),
         ?assertEqual([w, y, z], hm_crdt:value(S)),
         ?assertEqual(0, hm_crdt:metadata(S))
     end || C <- [A3, B3]],
    %% everything removed and stable: the replica is back to the empty one
    {A4, _} = mut({remove_all, [w, y, z]}, a, A3),
    A5 = hm_crdt:stable(hm_crdt:delivered(A4), A4),
    ?assertEqual([], hm_crdt:value(A5)),
    ?assertEqual(0, hm_crdt:metadata(A5)).

op_removed_leaves_nothing_test() ->
    S1 = hm_rwset:effect({add, x}, {a, 1}, #{a => 1}, hm_rwset:op_new()),
    S2 = hm_rwset:effect({remove, x}, {a, 2}, #{a => 2}, S1),
    ?assertEqual({#{}, #{x => #{{a, 2} => rmv}}}, S2),
    ?assertEqual(hm_rwset:op_new(), hm_rwset:stabilize(#{a => 2}, S2)),
    %% a present element loses its timestamps at stability
    S3 = hm_rwset:effect({add, y}, {a, 3}, #{a => 3}, S2),
    ?assertEqual({#{y => true}, #{}}, hm_rwset:stabilize(#{a => 3}, S3)).

%% A stable remove with a concurrent add that is not stable yet keeps winning.
op_partial_stability_test() ->
    S1 = hm_rwset:effect({remove, x}, {a, 1}, #{a => 1}, hm_rwset:op_new()),
    S2 = hm_rwset:effect({add, x}, {b, 1}, #{b => 1}, S1),
    ?assertEqual([], hm_rwset:op_value(S2)),
    S3 = hm_rwset:stabilize(#{a => 1}, S2),
    ?assertEqual(S2, S3),
    ?assertEqual([], hm_rwset:op_value(S3)),
    ?assertEqual(hm_rwset:op_new(), hm_rwset:stabilize(#{a => 1, b => 1}, S3)),
    %% an add that saw both wins, and prunes them
    S4 = hm_rwset:effect({add, x}, {c, 1}, #{a => 1, b => 1, c => 1}, S2),
    ?assertEqual({#{}, #{x => #{{c, 1} => add}}}, S4),
    ?assertEqual([x], hm_rwset:op_value(S4)).

op_reset_test() ->
    S1 = hm_rwset:effect({add_all, [x, y]}, {a, 1}, #{a => 1}, hm_rwset:op_new()),
    S2 = hm_rwset:stabilize(#{a => 1}, S1),
    S3 = hm_rwset:effect({remove, z}, {b, 1}, #{b => 1}, S2),
    S4 = hm_rwset:effect({add, z}, {a, 2}, #{a => 2}, S3),
    ?assertEqual([x, y], hm_rwset:op_value(S4)),
    %% reset by an op that saw a's entries but not b's remove
    S5 = hm_rwset:reset(#{a => 2}, S4),
    ?assertEqual({#{}, #{z => #{{b, 1} => rmv}}}, S5),
    ?assertEqual([], hm_rwset:op_value(S5)),
    ?assertEqual(1, hm_rwset:op_timestamps(S5)).

%% State and delta: a removed element keeps its remove dot (no stability there).
lattice_keeps_remove_dot_test_() ->
    [{atom_to_list(F),
      fun() ->
              {A1, _} = mut({add, x}, a, new(F)),
              {A2, _} = mut({remove, x}, a, A1),
              ?assertMatch({{dm, #{x := #{{a, 2} := rmv}}}, _}, hm_crdt:lattice(A2)),
              {A3, _} = mut({add, x}, a, A2),
              ?assertMatch({{dm, #{x := #{{a, 3} := add}}}, _}, hm_crdt:lattice(A3)),
              ?assertEqual(1, length(hm_dcc:dots(hm_crdt:lattice(A3))))
      end} || F <- [state, delta]].
