%% @doc Small, named examples of the causal layer (src/causal), meant to be read: each test
%% shows how one module is used and what it returns. The properties that check the same
%% modules on random inputs are in hm_causal_prop.
-module(hm_causal_tests).
-include_lib("eunit/include/eunit.hrl").

%%% ================================================================ hm_vv: version vectors

%% A version vector counts the events seen per replica; an absent entry is 0.
vv_counts_events_test() ->
    V = hm_vv:increment(a, hm_vv:increment(a, hm_vv:increment(b, hm_vv:new()))),
    ?assertEqual(#{a => 2, b => 1}, V),
    ?assertEqual(0, hm_vv:get(c, V)),
    %% it stands for the dots {a,1}, {a,2}, {b,1}
    ?assert(hm_vv:contains({a, 2}, V)),
    ?assertNot(hm_vv:contains({a, 3}, V)),
    ?assertNot(hm_vv:contains({c, 1}, V)).

vv_join_meet_compare_test() ->
    A = hm_vv:from_list([{a, 2}, {b, 1}]),
    B = hm_vv:from_list([{a, 1}, {c, 4}]),
    Join = hm_vv:join(A, B),
    Meet = hm_vv:meet(A, B),
    ?assertEqual(#{a => 2, b => 1, c => 4}, Join),   % pointwise max
    ?assertEqual(#{a => 1}, Meet),                   % pointwise min: what both have seen
    ?assertEqual(concurrent, hm_vv:compare(A, B)),
    ?assertEqual(before, hm_vv:compare(A, Join)),
    ?assertEqual('after', hm_vv:compare(Join, B)),
    ?assertEqual(equal, hm_vv:compare(A, hm_vv:join(A, Meet))),
    ?assert(hm_vv:descends(Join, A)),
    ?assert(hm_vv:concurrent(A, B)).

%% missing/2 counts the events the first vector has seen and the second has not.
vv_missing_test() ->
    A = hm_vv:from_list([{a, 2}, {b, 1}]),
    B = hm_vv:from_list([{a, 1}, {c, 4}]),
    ?assertEqual(2, hm_vv:missing(A, B)),          % a's second, b's first
    ?assertEqual(4, hm_vv:missing(B, A)),          % c's four
    ?assertEqual(0, hm_vv:missing(A, hm_vv:join(A, B))),
    ?assertEqual(3, hm_vv:missing(A, hm_vv:new())).

%% Zero entries are never stored, so equal vectors are equal terms.
vv_no_zero_entries_test() ->
    V = hm_vv:from_list([{a, 0}, {b, 3}, {b, 1}]),   % zeros dropped, duplicates joined
    ?assertEqual(#{b => 3}, V),
    ?assertEqual([{b, 3}], hm_vv:to_list(V)),
    ?assertEqual(#{}, hm_vv:set(b, 0, V)),
    ?assertEqual(hm_vv:new(), hm_vv:meet(#{a => 1}, #{b => 1})).

%%% ================================================================ hm_node_clock

%% The DottedDB node clock: per replica a contiguous base plus exceptions above it.
%% Counters 1, 2, 3, 5, 7 of `a' are base 3 with exceptions {5, 7}.
%% close_gaps: what `Of' holds, and every counter up to its highest that `Mine' lacks; a
%% counter `Mine' holds and `Of' lacks stays out; other replicas are left alone.
node_clock_close_gaps_test() ->
    Of = hm_node_clock:from_dots([{a, 1}, {a, 4}, {a, 6}, {b, 1}]),
    Mine = hm_node_clock:from_dots([{a, 1}, {a, 2}, {a, 4}, {a, 7}]),
    C = hm_node_clock:close_gaps([a, z], Of, Mine),
    ?assertEqual([{a, 1}, {a, 3}, {a, 4}, {a, 5}, {a, 6}], hm_node_clock:to_dots(C)),
    ?assertEqual(hm_node_clock:new(), hm_node_clock:close_gaps([z], Of, Mine)),
    ?assertEqual([{b, 1}], hm_node_clock:to_dots(hm_node_clock:close_gaps([b], Of, Of))).

node_clock_base_and_exceptions_test() ->
    NC = hm_node_clock:from_dots([{a, 1}, {a, 2}, {a, 3}, {a, 5}, {a, 7}]),
    ?assertEqual(3, hm_node_clock:base(a, NC)),
    ?assertEqual(#{a => 3}, hm_node_clock:base(NC)),
    ?assertEqual(7, hm_node_clock:max_counter(a, NC)),
    ?assert(hm_node_clock:contains({a, 5}, NC)),
    ?assert(hm_node_clock:contains({a, 7}, NC)),
    ?assertNot(hm_node_clock:contains({a, 4}, NC)),
    ?assertNot(hm_node_clock:contains({a, 6}, NC)),
    ?assertNot(hm_node_clock:contains({b, 1}, NC)),
    ?assertEqual([{a, 1}, {a, 2}, {a, 3}, {a, 5}, {a, 7}], hm_node_clock:to_dots(NC)),
    %% a fresh dot is one past the highest counter, not the first gap
    {Dot, NC1} = hm_node_clock:next_dot(a, NC),
    ?assertEqual({a, 8}, Dot),
    ?assert(hm_node_clock:contains({a, 8}, NC1)),
    ?assertEqual({{b, 1}, hm_node_clock:add({b, 1}, NC)}, hm_node_clock:next_dot(b, NC)).

%% Filling a gap moves the exceptions above it into the base; insertion order does not matter:
%% the same dots always make the same term.
node_clock_gap_filled_compacts_test() ->
    NC = hm_node_clock:from_dots([{a, 1}, {a, 2}, {a, 3}, {a, 5}, {a, 7}]),
    NC4 = hm_node_clock:add({a, 4}, NC),
    ?assertEqual(5, hm_node_clock:base(a, NC4)),
    NC6 = hm_node_clock:add({a, 6}, NC4),
    ?assertEqual(7, hm_node_clock:base(a, NC6)),
    ?assertEqual(hm_node_clock:from_vv(#{a => 7}), NC6),
    ?assertEqual(NC6, hm_node_clock:from_dots([{a, 7}, {a, 6}, {a, 5}, {a, 4}, {a, 3}, {a, 2},
                                               {a, 1}])),
    ?assertEqual(NC, hm_node_clock:add({a, 5}, NC)).          % adding twice changes nothing

%% Join is set union; leq is inclusion.
node_clock_join_leq_test() ->
    A = hm_node_clock:from_dots([{a, 1}, {a, 3}, {b, 2}]),
    B = hm_node_clock:from_dots([{a, 2}, {b, 1}]),
    AB = hm_node_clock:join(A, B),
    ?assertEqual([{a, 1}, {a, 2}, {a, 3}, {b, 1}, {b, 2}], hm_node_clock:to_dots(AB)),
    ?assertEqual(#{a => 3, b => 2}, hm_node_clock:base(AB)),
    ?assert(hm_node_clock:leq(A, AB)),
    ?assertNot(hm_node_clock:leq(A, B)),
    ?assertEqual(2, hm_node_clock:size(AB)),                  % replica entries
    ?assertEqual([a, b], hm_node_clock:replicas(AB)).

%% DottedDB anti-entropy: compare node clocks to learn which dots the peer lacks.
node_clock_missing_test() ->
    Mine = hm_node_clock:from_dots([{a, 1}, {a, 2}, {a, 3}, {a, 5}, {a, 7}, {b, 1}]),
    Peer = hm_node_clock:from_dots([{a, 1}, {a, 2}, {a, 7}, {c, 1}]),
    ?assertEqual([{a, 3}, {a, 5}, {b, 1}], hm_node_clock:missing(Mine, Peer)),
    ?assertEqual([{c, 1}], hm_node_clock:missing(Peer, Mine)).

%% The same when one side is ahead: nothing is missing from the side that is ahead.
node_clock_missing_peer_ahead_test() ->
    Mine = hm_node_clock:from_dots([{a, 1}, {a, 2}, {a, 3}, {a, 5}, {a, 7}]),
    Ahead = hm_node_clock:from_vv(#{a => 10}),
    ?assertEqual([{a, 4}, {a, 6}, {a, 8}, {a, 9}, {a, 10}], hm_node_clock:missing(Ahead, Mine)),
    ?assertEqual([], hm_node_clock:missing(Mine, Ahead)).

node_clock_encode_test() ->
    NC = hm_node_clock:from_dots([{a, 1}, {a, 2}, {a, 3}, {a, 5}, {a, 7}, {b, 1}]),
    Bin = hm_node_clock:encode(NC),
    ?assertMatch(<<"HNC", 1, _/binary>>, Bin),
    ?assertEqual({ok, NC}, hm_node_clock:decode(Bin)),
    ?assertEqual({ok, hm_node_clock:new()}, hm_node_clock:decode(hm_node_clock:encode(hm_node_clock:new()))),
    <<_, Rest/binary>> = Bin,
    ?assertEqual({error, bad_clock}, hm_node_clock:decode(<<"X", Rest/binary>>)),
    ?assertEqual({error, bad_clock}, hm_node_clock:decode(binary:part(Bin, 0, byte_size(Bin) - 1))),
    ?assertEqual({error, bad_clock}, hm_node_clock:decode(<<Bin/binary, 0>>)),
    ?assertEqual({error, bad_clock}, hm_node_clock:decode(<<>>)).

%% strip_vv drops the entries of a context that the node clock's bases already imply.
node_clock_strip_vv_test() ->
    NC = hm_node_clock:from_dots([{a, C} || C <- lists:seq(1, 10)] ++
                                     [{b, 1}, {b, 2}, {b, 3}, {b, 4}, {b, 5}, {b, 7}]),
    Ctx = hm_node_clock:from_dots([{a, 2}, {a, 4}, {b, 3}, {b, 7}]),
    Stripped = hm_node_clock:strip_vv(Ctx, NC),
    %% a: every dot =< base 10, dropped; b: 7 > base 5, kept as it is
    ?assertEqual([{b, 3}, {b, 7}], hm_node_clock:to_dots(Stripped)),
    Filled = hm_node_clock:join(Stripped, hm_node_clock:from_vv(hm_node_clock:base(NC))),
    ?assert(hm_node_clock:leq(Ctx, Filled)).

%%% ================================================================ hm_dcc

%% Add-wins: an add concurrent with a remove survives the join.
dcc_concurrent_add_remove_test() ->
    X0 = hm_dcc:new(hm_awset:empty_store()),
    X1 = hm_awset:update({add, x}, a, X0),                   % a adds x with dot {a,1}
    B = hm_awset:update({remove, x}, b, X1),                 % b saw it and removes it
    A = hm_awset:update({add, x}, a, X1),                    % meanwhile a adds x again: {a,2}
    J = hm_dcc:join(A, B),
    ?assertEqual(J, hm_dcc:join(B, A)),
    ?assertEqual([x], hm_awset:value(hm_dcc:store(J))),
    ?assertEqual([{a, 2}], hm_dcc:dots(J)),                  % {a,1} was seen and dropped by b
    ?assertEqual([{a, 1}, {a, 2}], hm_node_clock:to_dots(hm_dcc:context(J))),
    %% once a's add is seen, b's later remove wins
    ?assertEqual([], hm_awset:value(hm_dcc:store(hm_awset:update({remove, x}, b, J)))).

%% A delta is a small container; join_delta only visits the keys it lists.
dcc_join_delta_test() ->
    X = hm_awset:update({add_all, [x, y]}, a, hm_dcc:new(hm_awset:empty_store())),
    D = hm_awset:delta({remove, x}, a, X),
    ?assertEqual({{dm, #{x => #{}}}, hm_node_clock:from_dots([{a, 1}])}, D),
    ?assertEqual(hm_dcc:join(X, D), hm_dcc:join_delta(X, D)),
    ?assertEqual(hm_awset:update({remove, x}, a, X), hm_dcc:join_delta(X, D)).

%% DottedDB strip/fill of a stored object (the DottedDB paper, Algorithm 2): strip keeps the
%% versions' dots and drops the context entries the node clock's bases imply; fill restores
%% them, so a stale copy cannot bring a superseded version back.
dcc_strip_fill_object_test() ->
    %% object: key x last written at {a,4} (superseding {a,1..3}), key y with {b,7}
    Obj = {{dm, #{x => #{{a, 4} => true}, y => #{{b, 7} => true}}},
           hm_node_clock:from_dots([{a, 1}, {a, 2}, {a, 3}, {a, 4},
                                    {b, 1}, {b, 2}, {b, 3}, {b, 7}])},
    %% node clock: a up to 10, b up to 5 and 7
    NC = hm_node_clock:from_dots([{a, C} || C <- lists:seq(1, 10)] ++
                                     [{b, C} || C <- [1, 2, 3, 4, 5, 7]]),
    Stored = hm_dcc:strip(Obj, NC),
    ?assertEqual(hm_dcc:store(Obj), hm_dcc:store(Stored)),
    ?assertEqual([{b, 1}, {b, 2}, {b, 3}, {b, 7}], hm_node_clock:to_dots(hm_dcc:context(Stored))),
    Fetched = hm_dcc:fill(Stored, NC),
    ?assert(hm_node_clock:leq(hm_dcc:context(Obj), hm_dcc:context(Fetched))),
    %% a stale copy still holding x's older version {a,3}
    Stale = {{dm, #{x => #{{a, 3} => true}}}, hm_node_clock:from_dots([{a, 1}, {a, 2}, {a, 3}])},
    ?assertEqual([{a, 4}, {b, 7}], lists:sort(hm_dcc:dots(hm_dcc:join(Fetched, Stale)))),
    %% (without fill, the stripped context no longer shows {a,3} was seen: it comes back)
    ?assertEqual([{a, 3}, {a, 4}, {b, 7}], lists:sort(hm_dcc:dots(hm_dcc:join(Stored, Stale)))),
    %% once the node clock's base passes 7 for b, the object's context strips to nothing
    NC6 = hm_node_clock:add({b, 6}, NC),
    ?assert(hm_node_clock:is_empty(hm_dcc:context(hm_dcc:strip(Obj, NC6)))).

%%% ================================================================ hm_causal_buffer

%% A message waits until its predecessor from the same origin arrives.
buffer_waits_for_predecessor_test() ->
    {T1, A1} = hm_causal_buffer:send_msg(a, hm_causal_buffer:new()),
    {T2, _A2} = hm_causal_buffer:send_msg(a, A1),
    ?assertEqual({#{a => 1}, #{a => 2}}, {T1, T2}),
    M1 = {a, T1, hello}, M2 = {a, T2, world},
    {[], B1} = hm_causal_buffer:rcv_msg(M2, hm_causal_buffer:new()),
    ?assertEqual(1, hm_causal_buffer:pending_count(B1)),
    ?assertEqual([M2], hm_causal_buffer:pending(B1)),
    ?assertEqual(#{}, hm_causal_buffer:delivered(B1)),
    {Out, B2} = hm_causal_buffer:rcv_msg(M1, B1),
    ?assertEqual([M1, M2], Out),                              % in causal order, still tagged
    ?assertEqual(#{a => 2}, hm_causal_buffer:delivered(B2)),
    ?assertEqual(0, hm_causal_buffer:pending_count(B2)).

%% Across replicas: b replies to a's message; c gets the reply first and waits for a's.
buffer_cross_replica_dependency_test() ->
    {Ta, _} = hm_causal_buffer:send_msg(a, hm_causal_buffer:new()),
    Ma = {a, Ta, question},
    {[Ma], B1} = hm_causal_buffer:rcv_msg(Ma, hm_causal_buffer:new()),
    {Tb, _} = hm_causal_buffer:send_msg(b, B1),
    ?assertEqual(#{a => 1, b => 1}, Tb),
    Mb = {b, Tb, answer},
    C0 = hm_causal_buffer:new(),
    ?assertNot(hm_causal_buffer:is_ready(Mb, hm_causal_buffer:delivered(C0))),
    {[], C1} = hm_causal_buffer:rcv_msg(Mb, C0),
    {[Ma, Mb], C2} = hm_causal_buffer:rcv_msg(Ma, C1),
    ?assertEqual(#{a => 1, b => 1}, hm_causal_buffer:delivered(C2)).

%% A malformed message that names a cause that never comes waits; a different message of
%% the same origin and number that is ready replaces it and is delivered: the bad one does
%% not hold back its good twin (hm_badinput_prop's bad-event property checks the same on
%% random events).
buffer_ready_twin_replaces_waiting_one_test() ->
    Bad = {b, #{a => 3, b => 1}, x},
    Good = {b, #{b => 1}, y},
    {[], B1} = hm_causal_buffer:rcv_msg(Bad, hm_causal_buffer:new()),
    ?assertEqual([Bad], hm_causal_buffer:pending(B1)),
    {[Good], B2} = hm_causal_buffer:rcv_msg(Good, B1),
    ?assertEqual(#{b => 1}, hm_causal_buffer:delivered(B2)),
    ?assertEqual(0, hm_causal_buffer:pending_count(B2)),
    %% the bad one again is now a duplicate
    ?assertMatch({[], _}, hm_causal_buffer:rcv_msg(Bad, B2)),
    %% a twin that is not ready either leaves the first one waiting
    {[], B3} = hm_causal_buffer:rcv_msg({b, #{c => 2, b => 1}, z}, B1),
    ?assertEqual([Bad], hm_causal_buffer:pending(B3)).

%% A duplicate is dropped, whether already delivered or still buffered.
buffer_duplicate_dropped_test() ->
    M1 = {a, #{a => 1}, hello},
    M2 = {a, #{a => 2}, world},
    {[M1], B1} = hm_causal_buffer:rcv_msg(M1, hm_causal_buffer:new()),
    ?assert(hm_causal_buffer:is_duplicate(M1, hm_causal_buffer:delivered(B1))),
    ?assertEqual({[], B1}, hm_causal_buffer:rcv_msg(M1, B1)),
    %% own messages are delivered by send_msg: receiving them back is a duplicate too
    {T, A1} = hm_causal_buffer:send_msg(a, hm_causal_buffer:new()),
    ?assertEqual({[], A1}, hm_causal_buffer:rcv_msg({a, T, hello}, A1)),
    %% a buffered message received again is not buffered twice
    M3 = {a, #{a => 3}, again},
    {[], B2} = hm_causal_buffer:rcv_msg(M3, B1),
    ?assertEqual({[], B2}, hm_causal_buffer:rcv_msg(M3, B2)),
    ?assertEqual(1, hm_causal_buffer:pending_count(B2)),
    {[M2, M3], B3} = hm_causal_buffer:rcv_msg(M2, B2),
    ?assertEqual(0, hm_causal_buffer:pending_count(B3)).

%% After a state catch-up brought some effects by other means, advance/2 counts them as
%% delivered: covered buffered messages are dropped, those now ready are delivered.
buffer_advance_test() ->
    Ma = {a, #{a => 1}, question},
    Mb = {b, #{a => 1, b => 1}, answer},
    Mb2 = {b, #{a => 1, b => 2}, more},
    {[], C1} = hm_causal_buffer:rcv_msg(Mb, hm_causal_buffer:new()),
    {[], C2} = hm_causal_buffer:rcv_msg(Mb2, C1),
    %% the catch-up covered a's message: b's messages become ready
    {Out, C3} = hm_causal_buffer:advance(#{a => 1}, C2),
    ?assertEqual([Mb, Mb2], Out),
    ?assertEqual(#{a => 1, b => 2}, hm_causal_buffer:delivered(C3)),
    %% the catch-up covered a's and b's first message: the first is dropped, the second ready
    {Out2, C4} = hm_causal_buffer:advance(#{a => 1, b => 1}, C2),
    ?assertEqual([Mb2], Out2),
    ?assertEqual(0, hm_causal_buffer:pending_count(C4)),
    %% and a late copy of a covered message is a duplicate
    ?assertEqual({[], C4}, hm_causal_buffer:rcv_msg(Ma, C4)).

%% An interval `{Origin, First, Ts, Payload}' (a delta-interval) brings the origin's messages
%% First..Ts[Origin] at once: ready once it brings the next one (a prefix of it may be
%% delivered already), buffered otherwise, and it makes the singles it covers duplicates.
buffer_interval_test() ->
    I24 = {a, 2, #{a => 4}, joined},                 % a's messages 2, 3 and 4
    M1 = {a, #{a => 1}, one},
    M3 = {a, #{a => 3}, three},
    M5 = {a, #{a => 5}, five},
    ?assert(hm_causal_buffer:is_message(I24)),
    ?assertNot(hm_causal_buffer:is_message({a, 5, #{a => 4}, bad})),   % first past last
    ?assertNot(hm_causal_buffer:is_message({a, 0, #{a => 4}, bad})),
    %% not ready before message 1; buffered with 3 and 5
    {[], B1} = hm_causal_buffer:rcv_msg(I24, hm_causal_buffer:new()),
    {[], B2} = hm_causal_buffer:rcv_msg(M5, B1),
    {[], B3} = hm_causal_buffer:rcv_msg(M3, B2),
    ?assertEqual(3, hm_causal_buffer:pending_count(B3)),
    %% message 1 makes the interval ready, which covers 3; then 5 follows
    {Out, B4} = hm_causal_buffer:rcv_msg(M1, B3),
    ?assertEqual([M1, I24, M5], Out),
    ?assertEqual(#{a => 5}, hm_causal_buffer:delivered(B4)),
    ?assertEqual(0, hm_causal_buffer:pending_count(B4)),
    ?assert(hm_causal_buffer:is_duplicate(I24, hm_causal_buffer:delivered(B4))),
    %% a prefix delivered already: the interval is ready (its payload is a join) and
    %% counts the rest
    {[M1], C1} = hm_causal_buffer:rcv_msg(M1, hm_causal_buffer:new()),
    {[_], C2} = hm_causal_buffer:rcv_msg({a, #{a => 2}, two}, C1),
    {[I24], C3} = hm_causal_buffer:rcv_msg(I24, C2),
    ?assertEqual(#{a => 4}, hm_causal_buffer:delivered(C3)),
    %% its dependencies on other origins are those of its last message
    Ib = {b, 1, #{a => 1, b => 2}, joined},
    {[], D1} = hm_causal_buffer:rcv_msg(Ib, hm_causal_buffer:new()),
    {[M1, Ib], D2} = hm_causal_buffer:rcv_msg(M1, D1),
    ?assertEqual(#{a => 1, b => 2}, hm_causal_buffer:delivered(D2)).

%% A catch-up that covers a prefix of a buffered interval leaves it buffered for the rest,
%% and delivers it once it is ready.
buffer_advance_interval_test() ->
    I25 = {a, 2, #{a => 5, b => 1}, joined},
    {[], B1} = hm_causal_buffer:rcv_msg(I25, hm_causal_buffer:new()),
    {[], B2} = hm_causal_buffer:advance(#{a => 3}, B1),        % b's message missing
    ?assertEqual(1, hm_causal_buffer:pending_count(B2)),
    {[I25], B3} = hm_causal_buffer:advance(#{b => 1}, B2),
    ?assertEqual(#{a => 5, b => 1}, hm_causal_buffer:delivered(B3)),
    %% covered entirely: dropped
    {[], B4} = hm_causal_buffer:advance(#{a => 5}, B1),
    ?assertEqual(0, hm_causal_buffer:pending_count(B4)).

%% drop_origins/2 forgets the buffered messages of the origins chosen, and only those.
buffer_drop_origins_test() ->
    {[], B1} = hm_causal_buffer:rcv_msg({{n1, 1}, #{{n1, 1} => 2}, lost_gap}, hm_causal_buffer:new()),
    {[], B2} = hm_causal_buffer:rcv_msg({{n2, 1}, #{{n2, 1} => 2}, waits}, B1),
    B3 = hm_causal_buffer:drop_origins(fun(O) -> O =:= {n1, 1} end, B2),
    ?assertEqual(1, hm_causal_buffer:pending_count(B3)),
    ?assertMatch([{{n2, 1}, _, waits}], hm_causal_buffer:pending(B3)),
    ?assertEqual(hm_causal_buffer:delivered(B2), hm_causal_buffer:delivered(B3)).

%% An operation of a superseded incarnation that can never become ready leaves the buffer:
%% n1's first incarnation sent operation 2, operation 1 died with its crash. Once a newer
%% incarnation of n1 is known here, operation 2 is dropped and an unready operation of the
%% old incarnation is not buffered again; an operation of a live incarnation stays
%% buffered. Kept, it would wait forever.
tcsb_drops_superseded_incarnation_test() ->
    Old2 = {{n1, 1}, #{{n1, 1} => 2}, {async, k, delete}},
    B0 = hm_tcsb:new({n3, 1}, [n1, n2, n3]),
    {[], B1} = hm_tcsb:receive_op(Old2, B0),
    {[], B2} = hm_tcsb:receive_op({{n2, 1}, #{{n2, 1} => 2}, {async, k, delete}}, B1),
    ?assertEqual(2, hm_tcsb:pending(hm_tcsb:tick(B2))),        % n1's incarnation 1 still live
    {[_], B3} = hm_tcsb:receive_op({{n1, 2}, #{{n1, 2} => 1}, {async, k, delete}}, B2),
    ?assertEqual(1, hm_tcsb:pending(B3)),                       % n2's stays
    {[], B4} = hm_tcsb:receive_op(Old2, B3),
    ?assertEqual(1, hm_tcsb:pending(B4)),
    ?assertEqual(hm_tcsb:delivered(B3), hm_tcsb:delivered(B4)).

%% Nothing is stable while a member reports an operation of a superseded incarnation this
%% replica lacks, or has not acknowledged since hearing of the newer incarnation: the old
%% incarnation's operation, delivered later, could otherwise remove what was folded as
%% stable.
tcsb_stability_waits_for_superseded_incarnation_test() ->
    D1 = {{n1, 1}, #{{n1, 1} => 1}, {async, k, {write, r}}},
    Old = {{n2, 1}, #{{n2, 1} => 1}, {async, k, delete}},        % concurrent with D1
    {[D1], B0} = hm_tcsb:receive_op(D1, hm_tcsb:new({n3, 1}, [n1, n2, n3])),
    %% n2 restarted as incarnation 2, delivered D1 (not its old delete)
    B1 = hm_tcsb:receive_ack({n2, 2}, #{{n1, 1} => 1}, #{n2 => 2}, B0),
    %% n1 delivered n2's old delete, and acknowledges before hearing of n2's incarnation 2
    B2 = hm_tcsb:receive_ack({n1, 1}, #{{n1, 1} => 1, {n2, 1} => 1}, #{n1 => 1, n2 => 1}, B1),
    ?assertEqual(#{}, hm_tcsb:stable(B2)),
    %% ... and after: still nothing, this replica lacks the old delete
    B3 = hm_tcsb:receive_ack({n1, 1}, #{{n1, 1} => 1, {n2, 1} => 1}, #{n1 => 1, n2 => 2}, B2),
    ?assertEqual(#{}, hm_tcsb:stable(B3)),
    %% it arrives (relayed by n1): D1 is stable (n2's old delete is not: n2 lacks it)
    {[Old], B4} = hm_tcsb:receive_op(Old, B3),
    ?assertEqual(#{{n1, 1} => 1}, hm_tcsb:stable(B4)).

%% An acknowledgement that overtakes its sender's own operations waits; it counts once the
%% last of them is delivered here, alone or with operations they made deliverable, and not
%% before.
tcsb_early_ack_settles_on_delivery_test() ->
    N1 = {n1, 1}, N2 = {n2, 1},
    W1 = {N1, #{N1 => 1}, {async, a, delete}},
    W2 = {N1, #{N1 => 2}, {async, b, delete}},
    X1 = {N2, #{N1 => 2, N2 => 1}, {async, c, delete}},
    B0 = hm_tcsb:new({n3, 1}, [n1, n2, n3]),
    %% n2 delivered n1's two operations and its own; n1 delivered all but n2's
    Acked = fun(B) ->
                    B1 = hm_tcsb:receive_ack(N2, #{N1 => 2, N2 => 1}, #{}, B),
                    hm_tcsb:receive_ack(N1, #{N1 => 2}, #{}, B1)
            end,
    {[W1], B1} = hm_tcsb:receive_op(W1, Acked(B0)),
    ?assertEqual(#{}, hm_tcsb:stable(B1)),        % n1's ack waits for W2, n2's for X1
    {[W2], B2} = hm_tcsb:receive_op(W2, B1),
    ?assertEqual(#{}, hm_tcsb:stable(B2)),        % n2's still waits
    {[X1], B3} = hm_tcsb:receive_op(X1, B2),
    ?assertEqual(#{N1 => 2}, hm_tcsb:stable(B3)),
    %% the same when X1 arrives first, and W2 delivers itself and X1 together
    {[], C1} = hm_tcsb:receive_op(X1, B1),
    ?assertEqual(#{}, hm_tcsb:stable(C1)),
    {[W2, X1], C2} = hm_tcsb:receive_op(W2, C1),
    ?assertEqual(#{N1 => 2}, hm_tcsb:stable(C2)).

%% The log per origin: missing/3 starts where the peer's knowledge ends and gives the
%% operations in causal order (origin by origin, each one ready once those before it
%% arrived); gc drops the stable prefix of each origin.
tcsb_log_missing_and_gc_test() ->
    A = {a, 1}, B = {b, 1},
    Ms = [{A, #{A => 1}, x}, {A, #{A => 2}, x}, {B, #{A => 2, B => 1}, y},
          {A, #{A => 3}, x}, {B, #{A => 2, B => 2}, y}],
    T0 = lists:foldl(fun(M, Acc) -> element(2, hm_tcsb:receive_op(M, Acc)) end,
                     hm_tcsb:new({c, 1}, [a, b, c]), Ms),
    ?assertEqual(5, hm_tcsb:log_size(T0)),
    Order = fun(L) -> [{O, maps:get(O, Ts)} || {O, Ts, _} <- L] end,
    %% b's first depends on a's second
    ?assertEqual([{A, 1}, {A, 2}, {B, 1}, {A, 3}, {B, 2}], Order(hm_tcsb:missing(b, all, T0))),
    %% b acknowledged a's first two and its own first: the rest
    T1 = hm_tcsb:receive_ack(B, #{A => 2, B => 1}, #{}, T0),
    ?assertEqual([{A, 3}, {B, 2}], Order(hm_tcsb:missing(b, all, T1))),
    %% a and b both have a's first two: gc drops that prefix only
    T2 = hm_tcsb:receive_ack(A, #{A => 2}, #{}, T1),
    {Gone, T3} = hm_tcsb:gc_dots(T2),
    ?assertEqual([{A, 1}, {A, 2}], lists:sort(Gone)),
    ?assertEqual(3, hm_tcsb:log_size(T3)),
    ?assertEqual([{A, 3}, {B, 1}, {B, 2}], Order(hm_tcsb:log_msgs(T3))).

%% The bound on the log: past it, what every member heard from lately reported leaves the
%% log, though a silent member lacks it; stability does not move; the silent member is then
%% owed a state (lacks_given_up/2) and sent no operation, and while it stays silent what
%% the others report leaves the log under the bound too; once it reports them, it is
%% retransmitted to again, and nothing leaves under the bound.
tcsb_log_bound_gives_up_silent_member_test() ->
    A = {a, 1}, B = {b, 1}, C = {c, 1},
    B0 = lists:foldl(fun(I, Acc) -> {_, _, S} = hm_tcsb:broadcast(I, Acc), S end,
                     hm_tcsb:new(A, [a, b, c]), lists:seq(1, 10)),
    %% b and c were heard from at tick 0; c then says nothing for 20 ticks, b keeps up
    B1 = hm_tcsb:receive_ack(C, #{A => 2}, #{}, hm_tcsb:receive_ack(B, #{A => 2}, #{}, B0)),
    B2 = hm_tcsb:gc(lists:foldl(fun(_, Acc) ->
                                        hm_tcsb:receive_ack(B, #{A => 10}, #{}, hm_tcsb:tick(Acc))
                                end, B1, lists:seq(1, 20))),
    ?assertEqual(8, hm_tcsb:log_size(B2)),          % the first two are stable
    %% under the bound, or with none, nothing leaves
    ?assertEqual({[], B2}, hm_tcsb:give_up(10, 16, B2)),
    ?assertEqual({[], B2}, hm_tcsb:give_up(infinity, 16, B2)),
    %% past it, c still counts when it was heard from within the last 30 ticks
    ?assertEqual({[], B2}, hm_tcsb:give_up(5, 30, B2)),
    {Gone, B3} = hm_tcsb:give_up(5, 16, B2),
    ?assertEqual(lists:seq(3, 10), [maps:get(O, Ts) || {O, Ts, _} <- Gone]),
    ?assertEqual(0, hm_tcsb:log_size(B3)),
    ?assertEqual(#{A => 10}, hm_tcsb:given_up(B3)),
    ?assertEqual(hm_tcsb:stable(B2), hm_tcsb:stable(B3)),
    ?assertEqual(#{A => 2}, hm_tcsb:stable(B3)),
    ?assert(hm_tcsb:lacks_given_up(c, B3)),
    ?assertNot(hm_tcsb:lacks_given_up(b, B3)),
    ?assertMatch({[], _}, hm_tcsb:resend_due(c, B3)),
    %% c, still silent, is owed a state: what b reports leaves the log at once, under the
    %% bound too
    B3a = lists:foldl(fun(I, Acc) -> {_, _, S} = hm_tcsb:broadcast(I, Acc), S end, B3,
                      [11, 12]),
    B3b = hm_tcsb:receive_ack(B, #{A => 12}, #{}, B3a),
    ?assertEqual(2, hm_tcsb:log_size(B3b)),
    {Gone2, B3c} = hm_tcsb:give_up(5, 16, B3b),
    ?assertEqual([11, 12], [maps:get(O, Ts) || {O, Ts, _} <- Gone2]),
    ?assertEqual(#{A => 12}, hm_tcsb:given_up(B3c)),
    ?assertEqual(0, hm_tcsb:log_size(B3c)),
    %% c joined a's state and says so: it lacks nothing, and new operations go to it
    {_, _, B4} = hm_tcsb:broadcast(13, hm_tcsb:receive_ack(C, #{A => 12}, #{}, B3c)),
    %% nobody silent is owed a state: under the bound nothing leaves
    ?assertEqual({[], B4}, hm_tcsb:give_up(5, 16, B4)),
    ?assertNot(hm_tcsb:lacks_given_up(c, B4)),
    {Sent, _} = hm_tcsb:resend_due(c, lists:foldl(fun(_, Acc) -> hm_tcsb:tick(Acc) end, B4,
                                                  lists:seq(1, 5))),
    ?assertEqual([13], [maps:get(O, Ts) || {O, Ts, _} <- Sent]).

%% gc forgets exactly the stable prefix of an origin's log, however long: a short prefix
%% (walked), most of the log (split), the whole log (dropped at once); what stays keeps its
%% place, and the log grows and is collected again after.
tcsb_gc_prefix_lengths_test_() ->
    [{integer_to_list(Upto), fun() -> gc_upto(Upto) end} || Upto <- [0, 5, 30, 90, 99, 100]].

gc_upto(Upto) ->
    Self = {a, 1},
    Cast = fun(N, B0) -> lists:foldl(fun(_, Bx) -> element(3, hm_tcsb:broadcast(x, Bx)) end,
                                     B0, lists:seq(1, N))
           end,
    Seqs = fun(Msgs) -> lists:sort([maps:get(Self, Ts) || {_, Ts, _} <- Msgs]) end,
    B1 = Cast(100, hm_tcsb:new(Self, [a, b])),
    B2 = hm_tcsb:receive_ack({b, 1}, #{Self => Upto}, #{a => 1, b => 1}, B1),
    {Gone, B3} = hm_tcsb:gc_ops(B2),
    ?assertEqual(lists:seq(1, Upto), Seqs(Gone)),
    ?assertEqual(lists:seq(Upto + 1, 100), Seqs(hm_tcsb:log_msgs(B3))),
    B4 = hm_tcsb:receive_ack({b, 1}, #{Self => 110}, #{a => 1, b => 1}, Cast(20, B3)),
    {Gone2, B5} = hm_tcsb:gc_ops(B4),
    ?assertEqual(lists:seq(Upto + 1, 110), Seqs(Gone2)),
    ?assertEqual(lists:seq(111, 120), Seqs(hm_tcsb:log_msgs(B5))),
    %% fold_logged/3 visits what log_msgs/1 lists, and stops when told
    All = fun(M, Acc) -> [M | Acc] end,
    ?assertEqual(lists:sort(hm_tcsb:log_msgs(B3)), lists:sort(hm_tcsb:fold_logged(All, [], B3))),
    ?assertEqual(lists:sort(hm_tcsb:log_msgs(B5)), lists:sort(hm_tcsb:fold_logged(All, [], B5))),
    Three = fun(_, 2) -> {stop, three}; (_, N) -> N + 1 end,
    ?assertEqual(case 100 - Upto >= 3 of true -> {stop, three}; false -> 100 - Upto end,
                 hm_tcsb:fold_logged(Three, 0, B3)).

%% A log partly in its map (a retransmission round sorted it) and partly in its list of
%% newest operations: gc of any prefix, what stays, its size and what a member lacking
%% everything is sent.
tcsb_gc_sorted_and_appended_test_() ->
    [{integer_to_list(Upto), fun() -> gc_mixed(Upto) end}
     || Upto <- [0, 1, 30, 59, 60, 61, 80, 99, 100]].

gc_mixed(Upto) ->
    Self = {a, 1},
    Cast = fun(N, B0) -> lists:foldl(fun(_, Bx) -> element(3, hm_tcsb:broadcast(x, Bx)) end,
                                     B0, lists:seq(1, N))
           end,
    Seqs = fun(Msgs) -> [maps:get(Self, Ts) || {_, Ts, _} <- Msgs] end,
    Ack = fun(Seq, B) -> hm_tcsb:receive_ack({b, 1}, #{Self => Seq}, #{a => 1, b => 1}, B) end,
    Ticks = fun(B) -> lists:foldl(fun(_, Bx) -> hm_tcsb:tick(Bx) end, B, lists:seq(1, 3)) end,
    B1 = Ack(0, Ticks(Cast(60, hm_tcsb:new(Self, [a, b])))),
    %% a round of retransmission to b, once the operations are old enough: every
    %% operation of the log, oldest first
    {Round, B2} = hm_tcsb:resend_due(b, B1),
    ?assertEqual(lists:seq(1, 60), Seqs(Round)),
    B3 = Cast(40, B2),
    ?assertEqual(100, hm_tcsb:log_size(B3)),
    ?assertEqual(lists:seq(1, 100), Seqs(hm_tcsb:missing(b, all, B3))),
    {Gone, B4} = hm_tcsb:gc_ops(Ack(Upto, B3)),
    ?assertEqual(lists:seq(1, Upto), lists:sort(Seqs(Gone))),
    ?assertEqual(lists:seq(Upto + 1, 100), Seqs(hm_tcsb:log_msgs(B4))),
    ?assertEqual(100 - Upto, hm_tcsb:log_size(B4)),
    ?assertEqual(lists:seq(Upto + 1, 100), Seqs(hm_tcsb:missing(b, all, B4))),
    %% and on: more operations, then everything stable
    {Gone2, B5} = hm_tcsb:gc_ops(Ack(110, Cast(10, B4))),
    ?assertEqual(lists:seq(Upto + 1, 110), lists:sort(Seqs(Gone2))),
    ?assertEqual(0, hm_tcsb:log_size(B5)).

%% A buffer can start from a delivered vector (restored from disc).
buffer_new_from_delivered_test() ->
    B = hm_causal_buffer:new(#{a => 2}),
    ?assertEqual({[], B}, hm_causal_buffer:rcv_msg({a, #{a => 2}, old}, B)),
    M = {a, #{a => 3}, new},
    ?assertMatch({[M], _}, hm_causal_buffer:rcv_msg(M, B)).

%% is_message/1 guards rcv_msg/2 against malformed input from the network.
is_message_test_() ->
    Good = [{a, #{a => 1}, payload}, {a, #{a => 3, b => 2}, {any, term}}],
    Bad = [{a, [{a, 1}], p},                % timestamp not a map
           {a, #{b => 1}, p},               % no entry for the origin
           {a, #{a => 0}, p},               % origin entry 0
           {a, #{a => 1.0}, p},             % counter not an integer
           {a, #{a => 1, b => x}, p},       % another counter not an integer
           {a, #{a => 1, b => -1}, p},      % negative counter
           {a, #{a => 1}},                  % wrong tuple size
           {a, #{a => 1}, p, extra},
           [a, #{a => 1}, p],
           undefined],
    [{title("accepts", M), ?_assert(hm_causal_buffer:is_message(M))} || M <- Good] ++
        [{title("rejects", M), ?_assertNot(hm_causal_buffer:is_message(M))} || M <- Bad].

title(What, M) -> lists:flatten(io_lib:format("is_message ~s ~0p", [What, M])).

%% The circular wait after a partition under load. Member c acknowledges that it delivered
%% 3 of its own operations, which this member (a) has not received yet: c's acknowledgement
%% cannot settle here (stability must wait for c's operations), yet retransmission to c
%% must start where c says it is, not at what a settled acknowledgement said (nothing, here:
%% a resend from the start of the log, capped, only ever sent c what it had).
tcsb_resend_from_unsettled_ack_test() ->
    A = {a, 1}, C = {c, 1},
    Ops = lists:foldl(fun(I, Acc) ->
                              {_, _, B} = hm_tcsb:broadcast(I, Acc), B
                      end, hm_tcsb:new(A, [a, c], #{}, #{window => 2}), lists:seq(1, 6)),
    B0 = lists:foldl(fun(_, Acc) -> hm_tcsb:tick(Acc) end, Ops, lists:seq(1, 3)),
    %% c has a's first 4 and 3 of its own
    B1 = hm_tcsb:receive_ack(C, #{A => 4, C => 3}, #{}, B0),
    ?assertEqual(#{}, hm_tcsb:known(B1)),                     % not settled
    ?assertEqual(#{}, hm_tcsb:stable(B1)),
    {Sent, B2} = hm_tcsb:resend_due(c, B1),
    Seqs = fun(L) -> [maps:get(O, Ts) || {O, Ts, _} <- L] end,
    ?assertEqual([5, 6], Seqs(Sent)),
    ?assertEqual({[], B2}, hm_tcsb:resend_due(c, B2)).        % nothing left to send

%% Retransmission keeps at most `window' operations in flight per member, continues where
%% the last round stopped while the member acknowledges, and goes back to what the member
%% reported once a round stays unacknowledged for 4 ticks (it was lost).
tcsb_resend_window_test() ->
    A = {a, 1}, C = {c, 1},
    B0 = lists:foldl(fun(I, Acc) -> {_, _, B} = hm_tcsb:broadcast(I, Acc), B end,
                     hm_tcsb:new(A, [a, c], #{}, #{window => 3}), lists:seq(1, 10)),
    Tick = fun(B) -> hm_tcsb:tick(hm_tcsb:tick(B)) end,
    Seqs = fun(L) -> [maps:get(O, Ts) || {O, Ts, _} <- L] end,
    B1 = hm_tcsb:receive_ack(C, #{}, #{}, Tick(B0)),
    {R1, B2} = hm_tcsb:resend_due(c, B1),
    ?assertEqual([1, 2, 3], Seqs(R1)),
    %% the window is full until c acknowledges
    {R2, B3} = hm_tcsb:resend_due(c, hm_tcsb:tick(B2)),
    ?assertEqual([], R2),
    %% c acknowledges 2 of them: 2 more go
    {R3, B4} = hm_tcsb:resend_due(c, hm_tcsb:receive_ack(C, #{A => 2}, #{}, hm_tcsb:tick(B3))),
    ?assertEqual([4, 5], Seqs(R3)),
    %% nothing more is acknowledged for 4 ticks: the round was lost, start again at 3
    B5 = lists:foldl(fun(_, B) -> hm_tcsb:receive_ack(C, #{A => 2}, #{}, hm_tcsb:tick(B)) end,
                     B4, lists:seq(1, 4)),
    {R4, _} = hm_tcsb:resend_due(c, B5),
    ?assertEqual([3, 4, 5], Seqs(R4)).

%% A member busy with a backlog acknowledges a round late, but what it reports keeps moving:
%% the round is not lost, and nothing is sent again (after a heal, going back sent a busy
%% member each operation three to four times: bench/REPORT.md). Once it stops moving for 4
%% ticks, the round is lost and retransmission goes back to what it reported.
tcsb_resend_busy_member_test() ->
    A = {a, 1}, C = {c, 1},
    B0 = lists:foldl(fun(I, Acc) -> {_, _, B} = hm_tcsb:broadcast(I, Acc), B end,
                     hm_tcsb:new(A, [a, c], #{}, #{window => 6}), lists:seq(1, 10)),
    Seqs = fun(L) -> [maps:get(O, Ts) || {O, Ts, _} <- L] end,
    Ack = fun(N, B) -> hm_tcsb:receive_ack(C, #{A => N}, #{}, hm_tcsb:tick(B)) end,
    {R1, B1} = hm_tcsb:resend_due(c, Ack(0, hm_tcsb:tick(B0))),
    ?assertEqual([1, 2, 3, 4, 5, 6], Seqs(R1)),
    %% c delivers one more of them per tick, for 5 ticks: nothing is resent
    {Resent, B2} = lists:foldl(fun(N, {Acc, B}) ->
                                       {R, Bx} = hm_tcsb:resend_due(c, Ack(N, B)),
                                       {Acc ++ Seqs(R), Bx}
                               end, {[], B1}, lists:seq(1, 5)),
    ?assertEqual([], [S || S <- Resent, S =< 6]),
    %% then it stops at 5: after 4 ticks the rest of the round is sent again, from 6
    B3 = lists:foldl(fun(_, B) -> element(2, hm_tcsb:resend_due(c, Ack(5, B))) end, B2,
                     lists:seq(1, 3)),
    {R4, _} = hm_tcsb:resend_due(c, Ack(5, B3)),
    ?assertMatch([6 | _], Seqs(R4)).

%% Relays: one member relays other origins' operations to a member that lacks them (the first
%% node among those alive that had some of them 8 ticks ago), not all of them (after a heal
%% every member relayed everything to the other side: each operation arrived N-1 times).
%% The others relay only once the member has not moved on that origin for 4 ticks (the
%% first one cannot reach it, say).
tcsb_relay_by_one_member_test() ->
    A = {a, 1}, B = {b, 1}, C = {c, 1},
    Seqs = fun(L) -> [maps:get(A, Ts) || {_, Ts, _} <- L] end,
    %% b has a's 3 operations, 9 ticks old; c acknowledged every tick, and a too when alive
    Acks = fun(Alive, X) ->
                   lists:foldl(fun({R, V}, Y) -> hm_tcsb:receive_ack(R, V, #{}, Y) end, X,
                               [{C, #{}} | [{A, #{A => 3}} || Alive]])
           end,
    AtB = fun(Alive) ->
                  Bx = lists:foldl(fun(M, X) -> element(2, hm_tcsb:receive_op(M, X)) end,
                                   hm_tcsb:new(B, [a, b, c]), all_ops(A, 3)),
                  Acks(Alive, lists:foldl(fun(_, X) -> hm_tcsb:tick(Acks(Alive, X)) end, Bx,
                                          lists:seq(1, 9)))
          end,
    Tick = fun(X) -> hm_tcsb:receive_ack(A, #{A => 3}, #{},
                                         hm_tcsb:receive_ack(C, #{}, #{}, hm_tcsb:tick(X)))
           end,
    %% a is alive: b leaves the relay to a
    {R1, B1} = hm_tcsb:resend_due(c, AtB(true)),
    ?assertEqual([], R1),
    %% c does not move on a's operations for 4 ticks: b relays them
    B2 = lists:foldl(fun(_, X) -> {[], X1} = hm_tcsb:resend_due(c, Tick(X)), X1 end, B1,
                     lists:seq(1, 3)),
    {R2, _} = hm_tcsb:resend_due(c, Tick(B2)),
    ?assertEqual([1, 2, 3], Seqs(R2)),
    %% a is not alive: b relays at once
    {R3, _} = hm_tcsb:resend_due(c, AtB(false)),
    ?assertEqual([1, 2, 3], Seqs(R3)).

%% A member that stopped moving on an origin for 4 ticks gets that origin's operations from
%% another member as soon as they are 2 ticks old there, whoever the chosen relay is: the
%% origin and the chosen relay may be alive for every member but this one (after a heal,
%% the connection between two nodes can stay silent for seconds while TCP's retransmission
%% timer, backed off during the cut, runs out; a third node that got the origin's
%% operations meanwhile relayed them only once they were 8 ticks old there, and the member
%% stuck on that origin held back every operation that depended on them: its other members'
%% writers waited on flow control for 2 s). While the member moves on the origin, the
%% origin resends its own.
tcsb_relay_to_member_stuck_on_origin_test() ->
    A = {a, 1}, B = {b, 1}, C = {c, 1}, Ms = [a, b, c],
    Seqs = fun(L) -> [maps:get(A, Ts) || {_, Ts, _} <- L] end,
    Ops = all_ops(A, 3),
    %% b, ticking from 0 to 7: a acknowledges every tick (it has its 3 operations), c
    %% reports `CHas(T)' of a; b gets a's operations at tick 3 and calls resend_due/2 for c
    %% at every tick, as the table does; returns what it sent c of them, per tick
    Run = fun(CHas) ->
                  {Sent, _} =
                      lists:foldl(
                        fun(T, {Acc, X}) ->
                                Got = fun(M, Y) -> element(2, hm_tcsb:receive_op(M, Y)) end,
                                X1 = case T of
                                         3 -> lists:foldl(Got, X, Ops);
                                         _ -> X
                                     end,
                                X2 = hm_tcsb:receive_ack(
                                       C, CHas(T), #{}, hm_tcsb:receive_ack(A, #{A => 3}, #{}, X1)),
                                {R, X3} = hm_tcsb:resend_due(c, X2),
                                {Acc ++ [{T, Seqs(R)}], hm_tcsb:tick(X3)}
                        end, {[], hm_tcsb:new(B, Ms)}, lists:seq(0, 7)),
                  Sent
          end,
    %% c has had a's first operation since tick 0 and has not moved on a since: b relays
    %% the other two at tick 5, once they are 2 ticks old there (at tick 11 when both took
    %% 8 ticks)
    ?assertEqual([{0, []}, {1, []}, {2, []}, {3, []}, {4, []}, {5, [2, 3]}, {6, []}, {7, []}],
                 Run(fun(_) -> #{A => 1} end)),
    %% c moves on a every other tick (a's own resends reach it): b leaves them to a
    ?assertEqual([], [X || {_, X} <- Run(fun(T) -> #{A => max(1, min(3, T div 2))} end),
                           X =/= []]).

%% An origin silent for 2 ticks (cut off, or down) cannot resend its operations: the first
%% member that has what another lacks of it relays them 2 ticks after logging them, as the
%% origin would, not 8 (a member lacking one of them cannot deliver what depends on it, from
%% any origin: under full load, the side of a cut that had it buffered the other members'
%% operations for 2 s). While the origin acknowledges, it is left to resend them itself.
tcsb_relay_for_silent_origin_test() ->
    B = {b, 1}, C = {c, 1}, Ms = [a, b, c],
    Seqs = fun(L) -> [maps:get(C, Ts) || {_, Ts, _} <- L] end,
    {Ops, _} = lists:mapfoldl(fun(I, X) -> {M, _, X1} = hm_tcsb:broadcast(I, X), {M, X1} end,
                              hm_tcsb:new(C, Ms), lists:seq(1, 3)),
    %% b has c's 3 operations, logged at tick 0; a lacks them and acknowledges every tick;
    %% c acknowledges every tick, or only at tick 0 (then it is cut off)
    AtB = fun(CAlive, Ticks) ->
                  Acks = fun(T, X) ->
                                 lists:foldl(fun({R, V}, Y) -> hm_tcsb:receive_ack(R, V, #{}, Y)
                                             end, X, [{{a, 1}, #{}}]
                                             ++ [{C, #{C => 3}} || CAlive orelse T =:= 0])
                         end,
                  Bx = lists:foldl(fun(M, X) -> element(2, hm_tcsb:receive_op(M, X)) end,
                                   hm_tcsb:new(B, Ms), Ops),
                  Acks(Ticks, lists:foldl(fun(T, X) -> hm_tcsb:tick(Acks(T, X)) end, Bx,
                                          lists:seq(0, Ticks - 1)))
          end,
    %% c acknowledges: b leaves its operations to it
    ?assertEqual([], Seqs(element(1, hm_tcsb:resend_due(a, AtB(true, 4))))),
    %% c silent for 2 ticks: not yet
    ?assertEqual([], Seqs(element(1, hm_tcsb:resend_due(a, AtB(false, 2))))),
    %% c silent for 3 ticks: b relays them, 4 ticks before it would have for any origin
    ?assertEqual([1, 2, 3], Seqs(element(1, hm_tcsb:resend_due(a, AtB(false, 4))))).

%% The member that relays at once to a member lacking operations is the first of those that
%% had some of them 8 ticks ago (what a member relays is what it logged that long ago): one
%% that lacks them too (restarted, behind like it) cannot relay them, nor one that got them
%% only lately (it catches up itself). Found under full load with both disc copies
%% restarted: the first node relayed nothing, the others waited for it, and the two copies
%% stayed behind; then, with the first node that had more, a copy catching up itself was
%% that node.
tcsb_relay_by_member_that_has_test() ->
    B = {b, 1}, C = {c, 1}, D = {d, 1}, Ms = [a, b, c, d],
    Seqs = fun(L) -> [maps:get(D, Ts) || {_, Ts, _} <- L] end,
    {Ops, _} = lists:mapfoldl(fun(I, X) -> {M, _, X1} = hm_tcsb:broadcast(I, X), {M, X1} end,
                              hm_tcsb:new(D, Ms), lists:seq(1, 3)),
    %% c has d's 3 operations, 9 ticks old; a lacks them, and b reported what it has of d
    %% since tick `Since' (acknowledging every tick)
    AtC = fun(BHas, Since) ->
                  Acks = fun(T, X) ->
                                 BV = case T >= Since of true -> BHas; false -> #{} end,
                                 lists:foldl(fun({R, V}, Y) -> hm_tcsb:receive_ack(R, V, #{}, Y)
                                             end, X, [{{a, 1}, #{}}, {B, BV}, {D, #{D => 3}}])
                         end,
                  Cx = lists:foldl(fun(M, X) -> element(2, hm_tcsb:receive_op(M, X)) end,
                                   hm_tcsb:new(C, Ms), Ops),
                  Acks(9, lists:foldl(fun(T, X) -> hm_tcsb:tick(Acks(T, X)) end, Cx,
                                      lists:seq(0, 8)))
          end,
    %% b lacks them too: c relays at once
    {R1, _} = hm_tcsb:resend_due(a, AtC(#{}, 0)),
    ?assertEqual([1, 2, 3], Seqs(R1)),
    %% b has had them for 9 ticks: c leaves the relay to b
    {R2, _} = hm_tcsb:resend_due(a, AtC(#{D => 3}, 0)),
    ?assertEqual([], R2),
    %% b got them a tick ago: it cannot relay them yet, c does
    {R3, _} = hm_tcsb:resend_due(a, AtC(#{D => 3}, 8)),
    ?assertEqual([1, 2, 3], Seqs(R3)).

%% A member far behind (a) catches up in a few ticks when the others have what it lacks,
%% whatever the origins. Two origins, d and e, wrote in turn (each operation depends on the
%% other origin's previous one); c has had them all for 10 ticks, b got them only now. With
%% the relay chosen per origin from what members reported now, b (the first node with more)
%% was the relay of both origins but could relay nothing (it logged them too lately), c left
%% them to b, and only d and e resent their own, each blocked on the other's: one operation
%% per tick and acknowledgement (found with the simulator's receivers that take time to
%% apply, and by the full-load fault campaign: 30 s to quiesce).
tcsb_catch_up_across_origins_test() ->
    Ms = [a, b, c, d, e], A = {a, 1}, D = {d, 1}, E = {e, 1},
    %% d and e in turn, 20 operations each
    {Ops, _, _} = lists:foldl(
                    fun(I, {Acc, Xd, Xe}) ->
                            {Md, _, Xd1} = hm_tcsb:broadcast({d, I}, Xd),
                            {_, Xe1} = hm_tcsb:receive_op(Md, Xe),
                            {Me, _, Xe2} = hm_tcsb:broadcast({e, I}, Xe1),
                            {_, Xd2} = hm_tcsb:receive_op(Me, Xd1),
                            {Acc ++ [Md, Me], Xd2, Xe2}
                    end, {[], hm_tcsb:new(D, Ms), hm_tcsb:new(E, Ms)}, lists:seq(1, 20)),
    Has = fun(X) -> lists:foldl(fun(M, Y) -> element(2, hm_tcsb:receive_op(M, Y)) end, X, Ops) end,
    All = hm_tcsb:delivered(Has(hm_tcsb:new(A, Ms))),
    %% b, c, d, e and what they delivered; c from the start, b from tick 10
    Start = #{b => hm_tcsb:new({b, 1}, Ms), c => Has(hm_tcsb:new({c, 1}, Ms)),
              d => Has(hm_tcsb:new(D, Ms)), e => Has(hm_tcsb:new(E, Ms))},
    %% one tick: every member acknowledges to every other (a what it has), sends a what is
    %% due, and a delivers it
    Tick = fun({Others, Xa}) ->
                   AckAll = fun(N, X) ->
                                    lists:foldl(fun({M, Y}, Z) when M =/= N ->
                                                        hm_tcsb:receive_ack(hm_tcsb:self(Y),
                                                                            hm_tcsb:delivered(Y),
                                                                            #{}, Z);
                                                   (_, Z) -> Z
                                                end, hm_tcsb:receive_ack(A, hm_tcsb:delivered(Xa),
                                                                         #{}, X),
                                                maps:to_list(Others))
                            end,
                   maps:fold(fun(N, X, {Acc, Ya}) ->
                                     {Sent, X1} = hm_tcsb:resend_due(a, AckAll(N, X)),
                                     Ya1 = lists:foldl(fun(M, Z) ->
                                                               element(2, hm_tcsb:receive_op(M, Z))
                                                       end, Ya, Sent),
                                     {Acc#{N => hm_tcsb:tick(X1)}, Ya1}
                             end, {#{}, hm_tcsb:tick(Xa)}, Others)
           end,
    %% 10 ticks in which a lacks everything and nothing is sent to it (it is cut off)...
    Quiet = fun({Others, Xa}) ->
                    {maps:map(fun(N, X) ->
                                      Acked = maps:fold(fun(M, Y, Z) when M =/= N ->
                                                                hm_tcsb:receive_ack(
                                                                  hm_tcsb:self(Y),
                                                                  hm_tcsb:delivered(Y), #{}, Z);
                                                           (_, _, Z) -> Z
                                                        end, X, Others),
                                      hm_tcsb:tick(Acked)
                              end, Others), hm_tcsb:tick(Xa)}
            end,
    {Others10, A10} = lists:foldl(fun(_, St) -> Quiet(St) end, {Start, hm_tcsb:new(A, Ms)},
                                  lists:seq(1, 10)),
    %% ... then b catches up, and a is reachable again
    Run = fun Loop(St = {_, Xa}, N) ->
                  case hm_vv:leq(All, hm_tcsb:delivered(Xa)) of
                      true -> N;
                      false when N >= 40 -> N;
                      false -> Loop(Tick(St), N + 1)
                  end
          end,
    Ticks = Run({Others10#{b := Has(maps:get(b, Others10))}, A10}, 0),
    ?assert(Ticks =< 2).

all_ops(Origin, N) ->
    {Ms, _} = lists:mapfoldl(fun(I, X) -> {M, _, X1} = hm_tcsb:broadcast(I, X), {M, X1} end,
                             hm_tcsb:new(Origin, [a, b, c]), lists:seq(1, N)),
    Ms.

%% A member restarts without its state (for instance Mnesia alone restarted under a ram copy,
%% which gives no nodedown): once a newer incarnation of its node is heard of, what the old
%% one acknowledged no longer counts for stability, and its late acknowledgements are ignored
%% (else its word would let operations the new incarnation lacks be folded as stable).
tcsb_gone_incarnation_acks_test() ->
    A = {a, 1}, C1 = {c, 1}, C2 = {c, 2},
    {Op = {A, _, _}, _, B0} = hm_tcsb:broadcast(x, hm_tcsb:new(A, [a, c])),
    ?assertMatch({A, #{A := 1}, x}, Op),
    B1 = hm_tcsb:receive_ack(C1, #{A => 1}, #{}, B0),
    ?assertEqual(#{A => 1}, hm_tcsb:stable(B1)),
    %% c's new incarnation says it has nothing yet
    B2 = hm_tcsb:receive_ack(C2, #{}, #{}, B1),
    ?assertEqual(#{}, hm_tcsb:stable(B2)),
    %% a late acknowledgement of the old one changes nothing
    B3 = hm_tcsb:receive_ack(C1, #{A => 1}, #{}, B2),
    ?assertEqual(#{}, hm_tcsb:stable(B3)),
    ?assertEqual(#{c => #{}}, hm_tcsb:known(B3)),
    %% the new incarnation catches up and says so
    B4 = hm_tcsb:receive_ack(C2, #{A => 1}, #{}, B3),
    ?assertEqual(#{A => 1}, hm_tcsb:stable(B4)).
