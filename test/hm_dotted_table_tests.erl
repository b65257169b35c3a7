%% @doc EUnit tests of {@link hm_dotted_table}: table operations as DottedDB requests on one
%% copy, and the Mnesia mirror of its `show' effects.
-module(hm_dotted_table_tests).
-include_lib("eunit/include/eunit.hrl").

copy(Id) -> element(1, hm_dotted:new(#{id => Id, peers => [a, b]})).

op(KeyOp, S) ->
    {S1, _} = hm_dotted_table:apply_op(KeyOp, S),
    S1.

shown(Key, S) -> element(1, hm_dotted:get(Key, S)).

%% two concurrent writes of `k' at `a': one local, one from `b'
with_siblings() ->
    A = op({k, {write, {t, k, 1}}}, copy(a)),
    {_, EB} = hm_dotted_table:apply_op({k, {write, {t, k, 2}}}, copy(b)),
    [Rep] = [M || {send, a, M} <- EB],
    {A1, _} = hm_dotted:handle(Rep, A),
    A1.

write_replaces_what_the_copy_has_seen_test() ->
    S = op({k, {write, {t, k, 2}}}, op({k, {write, {t, k, 1}}}, copy(a))),
    ?assertEqual([{t, k, 2}], shown(k, S)),
    S1 = with_siblings(),
    ?assertEqual([{t, k, 1}, {t, k, 2}], lists:sort(shown(k, S1))),
    ?assertEqual([{t, k, 3}], shown(k, op({k, {write, {t, k, 3}}}, S1))).

delete_leaves_nothing_test() ->
    S = op({k, delete}, with_siblings()),
    ?assertEqual([], shown(k, S)),
    ?assertEqual(#{}, hm_dotted:objects(S)).

delete_object_removes_one_sibling_test() ->
    S = with_siblings(),
    S1 = op({k, {delete_object, {t, k, 1}}}, S),
    ?assertEqual([{t, k, 2}], shown(k, S1)),
    %% a record the copy does not show: nothing happens, nothing is sent
    ?assertEqual({S, []}, hm_dotted_table:apply_op({k, {delete_object, {t, k, 9}}}, S)),
    ?assertEqual(none, hm_dotted_table:value_context(k, {t, k, 9}, S)),
    ?assertEqual(none, hm_dotted_table:value_context(other, {t, k, 1}, S)).

clear_deletes_every_key_test() ->
    S = lists:foldl(fun(K, Acc) -> op({K, {write, {t, K, v}}}, Acc) end, copy(a),
                    lists:seq(1, 5)),
    {S1, Effs} = hm_dotted_table:apply_op({'$all', clear}, S),
    ?assertEqual(#{}, hm_dotted:values(S1)),
    ?assertEqual(lists:seq(1, 5), lists:sort([K || {show, K, []} <- Effs])).

bad_op_test() ->
    S = copy(a),
    ?assertEqual({error, {bad_op, {k, frobnicate}}}, hm_dotted_table:apply_op({k, frobnicate}, S)),
    ?assertEqual({error, {bad_op, {k, {write, notarecord}}}},
                 hm_dotted_table:apply_op({k, {write, notarecord}}, S)).

mirror_test() ->
    ?assertEqual([{delete, k}, {write, {t, k, 1}}, {write, {t, k, 2}}, {delete, j}],
                 hm_dotted_table:mirror([{send, b, x}, {show, k, [{t, k, 1}, {t, k, 2}]},
                                         {timer, 5, strip}, {show, j, []}])),
    {_, Effs} = hm_dotted_table:apply_op({k, {write, {t, k, 1}}}, copy(a)),
    ?assertEqual([{delete, k}, {write, {t, k, 1}}], hm_dotted_table:mirror(Effs)).

%% a copy whose node leaves the group and comes back is a live id again, not a retired one
id_back_in_the_group_is_not_retired_test() ->
    {S0, _} = hm_dotted:new(#{id => a, peers => [a, b, c]}),
    {S1, _} = hm_dotted:set_peers([a, c], S0),
    ?assertEqual(1, maps:get(retired, hm_dotted:metadata(S1))),
    {S2, _} = hm_dotted:set_peers([a, b, c], S1),
    ?assertEqual(0, maps:get(retired, hm_dotted:metadata(S2))),
    ?assertEqual([a, b, c], hm_dotted:peers(S2)).

%% The dots an operation made on its copy: one per write or delete, one per key cleared,
%% none for a delete_object that matches nothing, and never a dot received from a peer.
made_test() ->
    NC = fun(S) -> hm_dotted:node_clock(S) end,
    Made = fun(KeyOp, S) -> hm_dotted_table:made(a, NC(S), NC(op(KeyOp, S))) end,
    S0 = with_siblings(),                         % a's own dot 1, b's dot 1
    ?assertEqual([{a, 2}], Made({k, {write, {t, k, 3}}}, S0)),
    ?assertEqual([{a, 2}], Made({k, delete}, S0)),
    ?assertEqual([], Made({k, {delete_object, {t, k, 9}}}, S0)),
    S1 = op({j, {write, {t, j, 1}}}, S0),
    ?assertEqual([{a, 3}, {a, 4}], Made({'$all', clear}, S1)),
    %% a dot that arrives from another copy is not this copy's
    A = op({k, {write, {t, k, 1}}}, copy(a)),
    {_, EB} = hm_dotted_table:apply_op({k, {write, {t, k, 2}}}, copy(b)),
    [Rep] = [M || {send, a, M} <- EB],
    {A1, _} = hm_dotted:handle(Rep, A),
    ?assertEqual([], hm_dotted_table:made(a, NC(A), NC(A1))),
    ?assertEqual([{b, 1}], hm_dotted_table:made(b, NC(A), NC(A1))).
