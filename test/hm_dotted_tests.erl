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

%% Copies named `{Node, Incarnation}': the group is given by node (placeholders `{Node, 0}'
%% until a copy is heard from); a copy started again without its state is a new
%% incarnation, which its peers learn from its first message (the old id retired, messages
%% of the old one dropped), and the first clock exchange with it, seeing that it lacks dots
%% every copy had, answers with the whole state.
incarnations_test() ->
    Opts = #{peers => [a, b], seed => 1},
    {A0, _} = hm_dotted:new(Opts#{id => {a, 1}}),
    ?assertEqual([{a, 1}, {b, 0}], hm_dotted:peers(A0)),
    {B0, _} = hm_dotted:new(Opts#{id => {b, 1}}),
    {A1, E1} = hm_dotted:put(k, v1, hm_dotted:new_context(), A0),
    [Rep] = [M || {send, {b, 0}, M} <- E1],
    {B1, _} = hm_dotted:handle(Rep, B0),
    ?assertEqual([{a, 1}, {b, 1}], hm_dotted:peers(B1)),
    %% B learns A's id, and A B's from B's clock; the dot-key entries every copy has go
    {B2, [{send, {a, 1}, Clock}, _]} = hm_dotted:timeout(anti_entropy, B1),
    {A2, [{send, {b, 1}, Repair}]} = hm_dotted:handle(Clock, A1),
    ?assertEqual([{a, 1}, {b, 1}], hm_dotted:peers(A2)),
    {B3, _} = hm_dotted:handle(Repair, B2),
    {A3, _} = exchange(A2, B3),
    ?assertEqual(#{}, hm_dotted:dot_keys(A3)),
    %% B restarts with nothing, as incarnation 2, and no peer ready: it is ready and empty
    {B4, _} = hm_dotted:new(Opts#{id => {b, 2}}),
    {A4, E4} = hm_dotted:put(k2, v2, hm_dotted:new_context(), A3),
    [Rep2] = [M || {send, {b, 1}, M} <- E4],
    {B5, _} = hm_dotted:handle(Rep2, B4),
    %% its clock reaches A: A retires {b, 1}, and answers with its whole state
    {_, [{send, {a, 1}, Clock2}, _]} = hm_dotted:timeout(anti_entropy, B5),
    {A5, [{send, {b, 2}, Full}]} = hm_dotted:handle(Clock2, A4),
    ?assertEqual([{a, 1}, {b, 2}], hm_dotted:peers(A5)),
    ?assertMatch({sync_repair, _, _, _, _, {full, _}}, Full),
    {B6, _} = hm_dotted:handle(Full, B5),
    ?assertEqual(hm_dotted:values(A5), hm_dotted:values(B6)),
    ?assertEqual(#{k => [v1], k2 => [v2]}, hm_dotted:values(B6)),
    %% a message of the old incarnation is dropped
    ?assertMatch({_, [{drop, {not_a_peer, replicate, {b, 1}}}]},
                 hm_dotted:handle({replicate, {b, 1}, k, {#{}, hm_node_clock:new()}}, A5)).

%% A's clock to B and B's answer back, then B's clock to A and A's answer back
exchange(A, B) ->
    {A1, [{send, _, CA}, _]} = hm_dotted:timeout(anti_entropy, A),
    {B1, [{send, _, RB}]} = hm_dotted:handle(CA, B),
    {A2, _} = hm_dotted:handle(RB, A1),
    {B2, [{send, _, CB}, _]} = hm_dotted:timeout(anti_entropy, B1),
    {A3, [{send, _, RA}]} = hm_dotted:handle(CB, A2),
    {B3, _} = hm_dotted:handle(RA, B2),
    {A3, B3}.

address_test() ->
    ?assertEqual({n1, 3}, {hm_dotted:address({n1, 3}), hm_dotted:incarnation({n1, 3})}),
    ?assertEqual({n1, 0}, {hm_dotted:address(n1), hm_dotted:incarnation(n1)}).
