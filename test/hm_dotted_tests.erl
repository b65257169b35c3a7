%% @doc EUnit unit tests of {@link hm_dotted} and {@link hm_merkle}: the client API of one copy,
%% its effects, and bad input (the laws are in hm_dotted_prop).
-module(hm_dotted_tests).
-include_lib("eunit/include/eunit.hrl").

copy(Id) -> copy(Id, #{}).
copy(Id, O) -> hm_dotted:new(maps:merge(#{id => Id, peers => [a, b]}, O)).

starts_its_timers_test() ->
    {_, Effs} = copy(a, #{strip_interval => 7, sync_interval => 9}),
    ?assertEqual([{timer, 7, strip}, {timer, 9, anti_entropy}], Effs).

put_get_delete_test() ->
    {S0, _} = copy(a),
    {[], C0} = hm_dotted:get(k, S0),
    {S1, E1} = hm_dotted:put(k, v1, C0, S0),
    ?assert(lists:member({show, k, [v1]}, E1)),
    ?assertMatch([{send, b, {replicate, a, k, _}}], [E || E = {send, _, _} <- E1]),
    {[v1], C1} = hm_dotted:get(k, S1),
    %% a blind put is a sibling; a put with the get's context replaces what the get returned
    {S2, _} = hm_dotted:put(k, v2, hm_dotted:new_context(), S1),
    ?assertEqual([v1, v2], element(1, hm_dotted:get(k, S2))),
    {S3, _} = hm_dotted:put(k, v3, C1, S2),
    ?assertEqual([v2, v3], element(1, hm_dotted:get(k, S3))),
    {_, C3} = hm_dotted:get(k, S3),
    {S4, E4} = hm_dotted:delete(k, C3, S3),
    ?assert(lists:member({show, k, []}, E4)),
    %% nothing of the key is stored: no tombstone
    ?assertEqual(#{}, hm_dotted:objects(S4)),
    ?assertEqual(0, hm_dotted:clock_entries(k, S4)).

bad_context_test() ->
    {S, _} = copy(a),
    ?assertEqual({error, bad_context}, hm_dotted:put(k, v, <<"nope">>, S)),
    ?assertEqual({error, bad_context}, hm_dotted:delete(k, not_a_context, S)).

drops_foreign_and_malformed_messages_test() ->
    {S, _} = copy(a),
    ?assertMatch({S, [{drop, {not_a_peer, replicate, z}}]},
                 hm_dotted:handle({replicate, z, k, {#{}, hm_node_clock:new()}}, S)),
    ?assertMatch({S, [{drop, {bad_message, replicate, b}}]},
                 hm_dotted:handle({replicate, b, k, garbage}, S)),
    ?assertMatch({S, [{drop, bad_message}]}, hm_dotted:handle(garbage, S)),
    ?assertMatch({S, [{drop, {bad_message, merkle, b}}]},
                 hm_dotted:handle({merkle, b, [a, b], hm_node_clock:new(), {nodes, []}}, S)).

anti_entropy_repairs_a_lost_write_test() ->
    {A0, _} = copy(a),
    {B0, _} = copy(b, #{seed => 3}),
    {A1, _} = hm_dotted:put(k, v, hm_dotted:new_context(), A0),   % replication lost
    {B1, [{send, a, Req}, {timer, _, anti_entropy}]} = hm_dotted:timeout(anti_entropy, B0),
    {_, [{send, b, Answer}]} = hm_dotted:handle(Req, A1),
    {B2, Effs} = hm_dotted:handle(Answer, B1),
    ?assertEqual([v], element(1, hm_dotted:get(k, B2))),
    ?assert(lists:member({show, k, [v]}, Effs)),
    ?assertEqual(hm_dotted:node_clock(A1), hm_dotted:node_clock(B2)).

merkle_tree_test() ->
    T0 = hm_merkle:new(#{fanout => 4, depth => 2}),
    ?assertEqual(0, hm_merkle:root(T0)),
    T1 = hm_merkle:put(k1, 1, hm_merkle:put(k2, 2, T0)),
    ?assertEqual([k1, k2], hm_merkle:keys(T1)),
    ?assertEqual(T1, hm_merkle:put(k2, 2, hm_merkle:put(k1, 1, T0))),
    ?assertEqual(T0, hm_merkle:remove(k2, hm_merkle:remove(k1, T1))),
    ?assertEqual(done, hm_merkle:compare(hm_merkle:start(T1), T1)),
    {reply, {nodes, Children}} = hm_merkle:compare(hm_merkle:start(T1), T0),
    ?assertEqual(4, length(Children)).
