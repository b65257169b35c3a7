%% States in parts (hm_ec_table_stream): two copies of the runtime's own core on map stores,
%% the messages between them carried by hand.
-module(hm_ec_table_stream_tests).
-include_lib("eunit/include/eunit.hrl").

copy(Node, PartKeys) ->
    {Alone, _} = hm_ec_table:new(#{tab => t, type => pawset, policy => term_order,
                                   record => {t, 3}, cookie => c, node => Node,
                                   incarnation => 1, members => [Node],
                                   store => hm_ec_store_map:new(set, ram), catch_up => 1,
                                   part_keys => PartKeys}),
    hm_ec_table:set_members([n1, n2], Alone).

write(K, V, {T, Ops}) ->
    {T1, Effs} = hm_ec_table:submit({K, {write, {t, K, V}}}, async, w, {1, [n2]}, T),
    {T1, Ops ++ [M || {send, n2, {op, M}} <- Effs]}.

%% Deliver `Msgs' (from `From') to copy `T': the messages it sends back to `From', and the
%% work it left for later (`continue').
deliver(From, Msgs, T) ->
    {T1, Out, _} = deliver_all(From, Msgs, T),
    {T1, Out}.

deliver_all(From, Msgs, T) ->
    lists:foldl(fun(M, {Tx, Out, Later}) ->
                        {Ty, Effs} = hm_ec_table:handle(From, c, M, Tx),
                        {Ty, Out ++ [Msg || {send, To, Msg} <- Effs, To =:= From],
                         Later ++ [C || {continue, C} <- Effs]}
                end, {T, [], []}, Msgs).

%% Carry out `N' steps of the work a copy left for later (all of it: `all').
continue(Later, T) -> continue(all, Later, T).

continue(0, Later, T) -> {T, Later};
continue(_, [], T) -> {T, []};
continue(N, [C | Rest], T) ->
    {T1, Effs} = hm_ec_table:timeout(C, T),
    continue(case N of all -> all; _ -> N - 1 end, Rest ++ [C1 || {continue, C1} <- Effs], T1).

rows(T) ->
    St = hm_ec_table:store(T),
    lists:sort([{K, hm_ec_store:read(K, St)} || K <- hm_ec_store:all_keys(St)]).

%% n1 writes key 0 (a version that would win under term order), 20 other keys, then key 0
%% again; n2, which has none of it, asks for n1's state. It comes in parts of 4 keys, four
%% ahead of what n2 has acknowledged; n2 joins none of it until it has every part, then one
%% part a step. n1's first write of key 0, delivered to n2 as an operation between two
%% steps, once the part holding the key is joined, is not applied again (the state holds its
%% successor already), and the rows end as n1's.
a_state_in_parts_is_joined_part_by_part_test() ->
    {N1, Ops} = lists:foldl(fun(K, Acc) -> write(K, K, Acc) end,
                            write(0, z, {copy(n1, 4), []}), lists:seq(1, 20)),
    {N1a, _} = write(0, b, {N1, []}),
    N2 = copy(n2, 4),
    %% n1's acknowledgement tells n2 how far behind it is: n2 asks for n1's state
    {_, [Ack]} = deliver_acks(N1a),
    {N2a, [Req = {merge_req, _}]} = deliver(n1, [Ack], N2),
    {N1b, [First = {merge, #{parts := {Id, Count}}}]} = deliver(n2, [Req], N1a),
    ?assertEqual(6, Count),                     % 21 keys, 4 a part
    {N2b, [{merge_part_ack, Id, 1}]} = deliver(n1, [First], N2a),
    {N1c, Next} = deliver(n2, [{merge_part_ack, Id, 1}], N1b),
    ?assertEqual([2, 3, 4, 5], [I || {merge_part, _, I, _} <- Next]),
    {N2c, Acks} = deliver(n1, Next, N2b),
    ?assertEqual([{merge_part_ack, Id, I} || I <- [2, 3, 4, 5]], Acks),
    %% nothing joined yet
    ?assertEqual([], rows(N2c)),
    {N1d, [Last = {merge_part, _, 6, _}]} = deliver(n2, Acks, N1c),
    {N2d, [{merge_part_ack, Id, 6}], Later} = deliver_all(n1, [Last], N2c),
    {_, []} = deliver(n2, [{merge_part_ack, Id, 6}], N1d),
    %% the first part (key 0 and 3 others), then n1's first write of key 0 as an operation
    {N2e, Later1} = continue(1, Later, N2d),
    ?assertMatch(#{keys_ahead := 4}, hm_ec_table:info([n1, n2], N2e)),
    [FirstA | _] = Ops,
    {N2f, _} = deliver(n1, [{op, FirstA}], N2e),
    ?assertEqual([{t, 0, b}], proplists:get_value(0, rows(N2f))),
    {N2g, []} = continue(Later1, N2f),
    ?assertEqual(hm_tcsb:delivered(hm_ec_table:tcsb(N1d)), hm_tcsb:delivered(hm_ec_table:tcsb(N2g))),
    ?assertEqual(rows(N1d), rows(N2g)),
    %% it holds nothing ahead of what it delivered: what n1 makes later is applied again
    ?assertMatch(#{keys_ahead := 0, state_catch_ups := 1}, hm_ec_table:info([n1, n2], N2g)).

deliver_acks(T) ->
    {T1, Effs} = hm_ec_table:tick([n1, n2], T),
    {T1, [A || {send, n2, A = {ack, _, _, _}} <- Effs]}.

ticks(N, T) ->
    lists:foldl(fun(_, {Tx, Out}) ->
                        {Ty, Effs} = hm_ec_table:tick([n1, n2], Tx),
                        {Ty, Out ++ [M || {send, n1, M = {merge_part_ack, _, _}} <- Effs]}
                end, {T, []}, lists:seq(1, N)).

twelve_keys_and_a_state_in_three_parts() ->
    {Id, N1, N2, _} = first_of_three_parts(fun(N) -> copy(N, 4) end),
    {N1a, [P2, P3]} = deliver(n2, [{merge_part_ack, Id, 1}], N1),
    {Id, N1a, N2, P2, P3}.

%% n1, a copy made by `Copy', holds keys 1 to 12; n2 asked for its state and has its first
%% part (acknowledged, that acknowledgement not delivered yet).
first_of_three_parts(Copy) ->
    {N1, _} = lists:foldl(fun(K, Acc) -> write(K, K, Acc) end, {Copy(n1), []},
                          lists:seq(1, 12)),
    N2 = Copy(n2),
    {N1a, [Ack]} = deliver_acks(N1),
    {N2a, [Req]} = deliver(n1, [Ack], N2),
    {N1b, [First = {merge, #{parts := {Id, 3}}}]} = deliver(n2, [Req], N1a),
    {N2b, [{merge_part_ack, Id, 1}]} = deliver(n1, [First], N2a),
    {Id, N1b, N2b, First}.

%% Parts read as they go: n1 writes key 1 again after the first part, which holds it, went,
%% and the operation never reaches n2. The last part, read after the write, holds the key
%% again and n1's delivered vector then: n2 ends with n1's rows and delivered vector, the
%% write included, without the operation.
a_key_written_after_its_part_went_comes_again_in_the_last_part_test() ->
    {Id, N1, N2, First} = first_of_three_parts(fun(N) -> copy(N, 4) end),
    ?assert(lists:member(1, first_part_keys(First))),
    {N1a, [_Lost]} = write(1, again, {N1, []}),
    {N1b, Parts} = deliver(n2, [{merge_part_ack, Id, 1}], N1a),
    ?assertEqual([2, 3], [I || {merge_part, _, I, _} <- Parts]),
    {N2a, _, Later} = deliver_all(n1, Parts, N2),
    {N2b, []} = continue(Later, N2a),
    ?assertEqual([{t, 1, again}], proplists:get_value(1, rows(N2b))),
    ?assertEqual(rows(N1b), rows(N2b)),
    ?assertEqual(hm_tcsb:delivered(hm_ec_table:tcsb(N1b)),
                 hm_tcsb:delivered(hm_ec_table:tcsb(N2b))).

%% Parts read as they go, and the receiver delivers the sender's operations while they are
%% on their way: it has every write of n1, and n1's new write of key 1, before the last part
%% comes. Key 1 is joined from the last part only (the first part's version lacks that
%% write, and joined under the last part's vector it would take the write for one it
%% superseded): n2 ends with the write.
a_key_the_receiver_has_newer_is_joined_from_the_last_part_only_test() ->
    {N1, Ops} = lists:foldl(fun(K, Acc) -> write(K, K, Acc) end, {copy(n1, 4), []},
                            lists:seq(1, 12)),
    N2 = copy(n2, 4),
    {N1a, [Ack]} = deliver_acks(N1),
    {N2a, [Req]} = deliver(n1, [Ack], N2),
    {N1b, [First = {merge, #{parts := {Id, 3}}}]} = deliver(n2, [Req], N1a),
    ?assert(lists:member(1, first_part_keys(First))),
    {N2b, [{merge_part_ack, Id, 1}]} = deliver(n1, [First], N2a),
    {N1c, [W]} = write(1, again, {N1b, []}),
    {N2c, _} = deliver(n1, [{op, M} || M <- Ops ++ [W]], N2b),
    ?assertEqual([{t, 1, again}], proplists:get_value(1, rows(N2c))),
    {N1d, Parts} = deliver(n2, [{merge_part_ack, Id, 1}], N1c),
    {N2d, _, Later} = deliver_all(n1, Parts, N2c),
    {N2e, []} = continue(Later, N2d),
    ?assertEqual([{t, 1, again}], proplists:get_value(1, rows(N2e))),
    ?assertEqual(rows(N1d), rows(N2e)).

%% Parts read at once (while a cluster speaks the previous wire version): a write made on
%% the sender after the state was built is in none of them; the receiver's delivered vector
%% stops before it, and the operation brings it.
parts_read_at_once_leave_a_later_write_to_its_operation_test() ->
    Eager = fun(N) -> hm_ec_table:set_parts_late(false, copy(N, 4)) end,
    {Id, N1, N2, First} = first_of_three_parts(Eager),
    ?assertNot(maps:is_key(late, element(2, First))),
    {N1a, [W]} = write(1, again, {N1, []}),
    {_, Parts} = deliver(n2, [{merge_part_ack, Id, 1}], N1a),
    {N2a, _, Later} = deliver_all(n1, Parts, N2),
    {N2b, []} = continue(Later, N2a),
    ?assertEqual([{t, 1, 1}], proplists:get_value(1, rows(N2b))),
    {N2c, _} = deliver(n1, [{op, W}], N2b),
    ?assertEqual(rows(N1a), rows(N2c)).

first_part_keys({merge, #{rows := {left_out, _, KeyRows}, meta := Meta}}) ->
    [K || {K, _} <- KeyRows ++ Meta].

%% A part lost on the way: the receiver, without a part for a while, acknowledges what it
%% has again, and the sender sends what follows it again.
a_lost_part_is_sent_again_test() ->
    {Id, N1, N2, _Lost, P3} = twelve_keys_and_a_state_in_three_parts(),
    %% part 3 alone arrives: kept, not joined, nothing acknowledged
    {N2a, []} = deliver(n1, [P3], N2),
    {N2b, Again} = ticks(9, N2a),
    ?assertEqual([{merge_part_ack, Id, 1}], Again),
    {N1a, Resent} = deliver(n2, Again, N1),
    ?assertEqual([2, 3], [I || {merge_part, _, I, _} <- Resent]),
    {N2c, _, Later} = deliver_all(n1, Resent, N2b),
    {N2d, []} = continue(Later, N2c),
    ?assertEqual(rows(N1a), rows(N2d)),
    ?assertEqual(hm_tcsb:delivered(hm_ec_table:tcsb(N1a)), hm_tcsb:delivered(hm_ec_table:tcsb(N2d))).

%% A transfer cut off in the middle (the sender is gone for good): the receiver gives it up
%% and its state is as before it; a state sent again afterwards is taken.
a_transfer_cut_off_leaves_the_state_as_it_was_test() ->
    {_, N1, N2, _, _} = twelve_keys_and_a_state_in_three_parts(),
    Before = rows(N2),
    {N2a, _} = ticks(60, N2),
    ?assertEqual(Before, rows(N2a)),
    ?assertMatch(#{keys_ahead := 0, state_catch_ups := 0}, hm_ec_table:info([n1, n2], N2a)),
    %% the sender forgot it too
    {N1g, _} = ticks(60, N1),
    {_, [Again = {merge, #{parts := {Id2, 3}}}]} = deliver(n2, [{merge_req, #{}}], N1g),
    {_, [{merge_part_ack, Id2, 1}]} = deliver(n1, [Again], N2a).

%% While a state in parts is on its way to a member, that member asking for a state is
%% answered `merge_none', not sent a second one.
a_member_receiving_a_state_is_not_built_another_test() ->
    {_, N1, _, _, _} = twelve_keys_and_a_state_in_three_parts(),
    ?assertEqual({merge_none}, hd(element(2, deliver(n2, [{merge_req, #{}}], N1)))).

%% A state in parts that the receiver does not take (it is receiving another, from another
%% member) is answered `merge_part_gone', and its sender drops the rest of it: an
%% acknowledgement of it later brings no part.
a_state_not_taken_is_dropped_by_its_sender_test() ->
    {Id, N1, N2, _, _} = twelve_keys_and_a_state_in_three_parts(),
    %% a second state from n1, once it forgot the first (n2 still receives that one)
    {N1t, _} = ticks(60, N1),
    {N1a, [Other = {merge, #{parts := {Id2, 3}}}]} = deliver(n2, [{merge_req, #{}}], N1t),
    ?assertNotEqual(Id, Id2),
    Busy = hm_ec_table:set_members([n1, n2, n3], N2),
    {_, NotTaken} = hm_ec_table:handle(n3, c, Other, Busy),
    ?assertEqual([{merge_part_gone, Id2}], [M || {send, n3, M} <- NotTaken]),
    %% n1 told so drops it: an acknowledgement of it is answered that it is gone
    {N1b, []} = deliver(n2, [{merge_part_gone, Id2}], N1a),
    ?assertEqual([{merge_part_gone, Id2}],
                 element(2, deliver(n2, [{merge_part_ack, Id2, 1}], N1b))).

%% While it joins a state in parts, a copy builds no state and no snapshot for another.
a_copy_midway_builds_no_state_test() ->
    {_, _, N2, P2, P3} = twelve_keys_and_a_state_in_three_parts(),
    {N2a, _, Later} = deliver_all(n1, [P2, P3], N2),
    {N2b, [_]} = continue(1, Later, N2a),
    ?assertMatch(#{keys_ahead := 4}, hm_ec_table:info([n1, n2], N2b)),
    {_, Answer} = hm_ec_table:handle(n1, c, {merge_req, #{}}, N2b),
    ?assertEqual([{merge_none}], [M || {send, n1, M} <- Answer]),
    {_, Snap} = hm_ec_table:handle(n1, c, {snapshot_req}, N2b),
    ?assertEqual([{snapshot_none}], [M || {send, n1, M} <- Snap]).

%% While a state in parts is on its way, the copy folds nothing. n3 wrote keys 1 to 12,
%% n1 has them, n2 has none and asks n1 for its state. After the first part, n2 writes
%% key 5, then gets n3's writes as operations too (retransmission), and n1's and n3's
%% acknowledgements: everything n2 holds is then stable. The part holding key 5 is joined
%% after that, and keeps n2's write: n1's state was built before it, and the write, had it
%% been folded as stable here, would count as one that state superseded.
a_write_made_while_parts_are_on_their_way_survives_the_join_test() ->
    Copy = fun(Node) ->
                   {Alone, _} = hm_ec_table:new(#{tab => t, type => pawset,
                                                  policy => term_order, record => {t, 3},
                                                  cookie => c, node => Node, incarnation => 1,
                                                  members => [Node],
                                                  store => hm_ec_store_map:new(set, ram),
                                                  catch_up => 1, part_keys => 4}),
                   hm_ec_table:set_members([n1, n2, n3], Alone)
           end,
    Submit = fun(K, V, T) ->
                     {T1, Effs} = hm_ec_table:submit({K, {write, {t, K, V}}}, async, w,
                                                     {1, [n1, n2, n3]}, T),
                     {T1, [M || {send, n1, M = {op, _}} <- Effs]}
             end,
    Acks = fun(To, T) ->
                   {T1, Effs} = hm_ec_table:tick([n1, n2, n3], T),
                   {T1, [A || {send, N, A = {ack, _, _, _}} <- Effs, N =:= To]}
           end,
    {N3, Ops3} = lists:foldl(fun(K, {T, Acc}) ->
                                     {T1, Ms} = Submit(K, K, T),
                                     {T1, Acc ++ Ms}
                             end, {Copy(n3), []}, lists:seq(1, 12)),
    {N1, _} = deliver(n3, Ops3, Copy(n1)),
    {N1a, Ack1} = Acks(n2, N1),
    {N2, [Req]} = deliver(n1, Ack1, Copy(n2)),
    {N1b, [First = {merge, #{parts := {_, 3}}}]} = deliver(n2, [Req], N1a),
    {N2a, [A1]} = deliver(n1, [First], N2),
    {N1c, [P2, P3]} = deliver(n2, [A1], N1b),
    {N2b, [W]} = Submit(5, mine, N2a),
    {N2c, _} = deliver(n3, Ops3, N2b),
    {N1d, _} = deliver(n2, [W], N1c),
    {N3a, _} = deliver(n2, [W], N3),
    {N1e, AckN1} = Acks(n2, N1d),
    {_, AckN3} = Acks(n2, N3a),
    {N2d, _} = deliver(n1, AckN1, N2c),
    {N2e, _} = deliver(n3, AckN3, N2d),
    {N2f, _} = hm_ec_table:tick([n1, n2, n3], N2e),
    ?assertMatch(#{stable := #{{n2, 1} := 1, {n3, 1} := 12}},
                 hm_ec_table:info([n1, n2, n3], N2f)),
    {N2g, _, Later} = deliver_all(n1, [P2, P3], N2f),
    {N2h, []} = continue(Later, N2g),
    ?assertEqual([{t, 5, mine}], proplists:get_value(5, rows(N1e))),
    ?assertEqual(rows(N1e), rows(N2h)).

%% A part of another shape is dropped on arrival, not kept: the transfer waits for it
%% again, and the copy's state is as before.
a_part_of_another_shape_is_dropped_test() ->
    {Id, _, N2, _, _} = twelve_keys_and_a_state_in_three_parts(),
    {N2a, Effs} = hm_ec_table:handle(n1, c, {merge_part, Id, 2, <<"not a part">>}, N2),
    ?assertMatch([{drop, {bad_message, t, n1, {merge_part, Id, 2}}}], Effs),
    {_, Again} = ticks(9, N2a),
    ?assertEqual([{merge_part_ack, Id, 1}], Again).
