%% Snapshots (hm_ec_table_transfer): a copy without state takes a member's, whole or in
%% parts. Two copies of the runtime's own core on map stores, the messages between them
%% carried by hand.
-module(hm_ec_table_transfer_tests).
-include_lib("eunit/include/eunit.hrl").

opts(Node, Members, Extra) ->
    maps:merge(#{tab => t, type => pawset, policy => term_order, record => {t, 3}, cookie => c,
                 node => Node, incarnation => 1, members => Members,
                 store => hm_ec_store_map:new(set, ram), part_keys => 4}, Extra).

%% n1, alone when it took keys `Keys' up, then with n2 as a member.
ready(Keys, Extra) ->
    {Alone, _} = hm_ec_table:new(opts(n1, [n1], Extra)),
    {T, _} = lists:foldl(fun(K, Acc) -> write(K, K, Acc) end, {Alone, []}, Keys),
    hm_ec_table:set_members([n1, n2], T).

%% n2, new: it asks n1 for a snapshot.
syncing(Extra) ->
    {T, [{send, n1, {snapshot_req}}]} = hm_ec_table:new(opts(n2, [n1, n2], Extra)),
    T.

write(K, V, {T, Ops}) -> op({K, {write, {t, K, V}}}, {T, Ops}).

op(KeyOp, {T, Ops}) ->
    {T1, Effs} = hm_ec_table:submit(KeyOp, async, w, {1, [n2]}, T),
    {T1, Ops ++ [{op, M} || {send, n2, {op, M}} <- Effs]}.

%% `Msgs' from `From' delivered to copy `T': what it sends back to `From'.
deliver(From, Msgs, T) ->
    lists:foldl(fun(M, {Tx, Out}) ->
                        {Ty, Effs} = hm_ec_table:handle(From, c, M, Tx),
                        {Ty, Out ++ [Msg || {send, To, Msg} <- Effs, To =:= From]}
                end, {T, []}, Msgs).

ticks(N, T) ->
    lists:foldl(fun(_, {Tx, Out}) ->
                        {Ty, Effs} = hm_ec_table:tick([n1, n2], Tx),
                        {Ty, Out ++ [M || {send, n1, M} <- Effs]}
                end, {T, []}, lists:seq(1, N)).

rows(T) ->
    St = hm_ec_table:store(T),
    lists:sort([{K, hm_ec_store:read(K, St)} || K <- hm_ec_store:all_keys(St)]).

delivered(T) -> hm_tcsb:delivered(hm_ec_table:tcsb(T)).

%% n1 holds keys 1 to 21 and sends its snapshot in parts of 4 keys (six parts), the first
%% at once, each next within four of the last acknowledged. n2 writes each part as it comes.
%% After the first part went, n1 deletes key 1 (in the first part), writes key 6 again (in
%% the second, not read yet) and writes key 30 (new); n2 gets those operations while parts
%% come, and keeps none of them (the members send again what the snapshot does not hold).
%% The last part holds the three keys as they are then, written over what n2 holds of
%% them: n2 ends with n1's rows and delivered vector.
a_large_snapshot_comes_in_parts_written_as_they_come_test() ->
    N1 = ready(lists:seq(1, 21), #{}),
    N2 = syncing(#{}),
    {N1a, [First = {snapshot, #{parts := {Id, 6}}}]} = deliver(n2, [{snapshot_req}], N1),
    {N2a, [{merge_part_ack, Id, 1}]} = deliver(n1, [First], N2),
    ?assertEqual([1, 2, 3, 4], [K || {K, _} <- rows(N2a)]),
    ?assertMatch(#{status := syncing}, hm_ec_table:info([n1, n2], N2a)),
    {N1b, Ops} = write(30, new, write(6, again, op({1, delete}, {N1a, []}))),
    {N2b, []} = deliver(n1, Ops, N2a),
    {N1c, Parts} = deliver(n2, [{merge_part_ack, Id, 1}], N1b),
    ?assertEqual([2, 3, 4, 5], [I || {merge_part, _, I, _} <- Parts]),
    {N2c, Acks} = deliver(n1, Parts, N2b),
    ?assertEqual([{merge_part_ack, Id, I} || I <- [2, 3, 4, 5]], Acks),
    ?assertMatch(#{status := syncing}, hm_ec_table:info([n1, n2], N2c)),
    {N1d, [Last = {merge_part, _, 6, _}]} = deliver(n2, Acks, N1c),
    {N2d, [{merge_part_ack, Id, 6} | _]} = deliver(n1, [Last], N2c),
    {_, []} = deliver(n2, [{merge_part_ack, Id, 6}], N1d),
    ?assertMatch(#{status := ready}, hm_ec_table:info([n1, n2], N2d)),
    ?assertEqual(rows(N1d), rows(N2d)),
    ?assertEqual([], proplists:get_value(1, rows(N2d), [])),
    ?assertEqual([{t, 6, again}], proplists:get_value(6, rows(N2d))),
    ?assertEqual(delivered(N1d), delivered(N2d)),
    %% what n1 writes next is applied at n2 as any operation
    {N1e, More} = write(2, later, {N1d, []}),
    {N2e, _} = deliver(n1, More, N2d),
    ?assertEqual(rows(N1e), rows(N2e)).

%% Keys change on the sender after the parts holding them were read: key 3 (first part) and
%% key 9 (third) after the fifth was read. The last part holds them again with the vector
%% they are as, and n2, which never gets those operations, ends with n1's rows.
a_key_changed_after_its_part_went_comes_in_a_later_part_test() ->
    N1 = ready(lists:seq(1, 21), #{}),
    N2 = syncing(#{}),
    {N1a, [First = {snapshot, #{parts := {Id, 6}}}]} = deliver(n2, [{snapshot_req}], N1),
    {N2a, _} = deliver(n1, [First], N2),
    {N1b, Parts} = deliver(n2, [{merge_part_ack, Id, 1}], N1a),
    {N2b, Acks} = deliver(n1, Parts, N2a),
    {N1c, _Lost} = write(9, later, op({3, delete}, {N1b, []})),
    {N1d, [Last = {merge_part, _, 6, Bin}]} = deliver(n2, Acks, N1c),
    {KeyRows, _, #{delivered := V}} = binary_to_term(Bin),
    ?assertEqual([3, 9, 21], lists:sort([K || {K, _} <- KeyRows])),
    ?assertEqual(delivered(N1d), V),
    {N2c, _} = deliver(n1, [Last], N2b),
    ?assertEqual(rows(N1d), rows(N2c)),
    ?assertEqual(delivered(N1d), delivered(N2c)).

%% Keys changed after the transfer began wait for the last part only while they are fewer
%% than four parts' worth: n1 writes keys 1 to 16 again after the first part (keys 1 to 4)
%% went, and the second part holds them all (its own 5 to 8 among them), so that no part
%% grows much past that; n2 ends with n1's rows.
keys_changed_meanwhile_go_once_they_fill_four_parts_test() ->
    N1 = ready(lists:seq(1, 32), #{}),
    N2 = syncing(#{}),
    {N1a, [First = {snapshot, #{parts := {Id, 8}}}]} = deliver(n2, [{snapshot_req}], N1),
    {N2a, _} = deliver(n1, [First], N2),
    {N1b, _} = lists:foldl(fun(K, Acc) -> write(K, again, Acc) end, {N1a, []},
                           lists:seq(1, 16)),
    {N1c, Parts = [{merge_part, _, 2, Bin2} | _]} =
        deliver(n2, [{merge_part_ack, Id, 1}], N1b),
    {KeyRows, _} = binary_to_term(Bin2),
    ?assertEqual(lists:seq(1, 16), lists:sort([K || {K, _} <- KeyRows])),
    {N2b, _} = deliver(n1, Parts, N2a),
    {N1d, Rest} = deliver(n2, [{merge_part_ack, Id, 5}], N1c),
    ?assertEqual([6, 7, 8], [I || {merge_part, _, I, _} <- Rest]),
    {N2d, _} = deliver(n1, Rest, N2b),
    ?assertMatch(#{status := ready}, hm_ec_table:info([n1, n2], N2d)),
    ?assertEqual(rows(N1d), rows(N2d)).

%% A copy receiving a snapshot in parts asks no member for another while parts come; once
%% they stall it acknowledges again and asks the members again, and after a while gives
%% the transfer up. The snapshot it then takes replaces what the first one wrote.
a_snapshot_in_parts_cut_off_is_asked_again_test() ->
    N1 = ready(lists:seq(1, 12), #{}),
    N2 = syncing(#{}),
    {_, [First = {snapshot, #{parts := {Id, 3}}}]} = deliver(n2, [{snapshot_req}], N1),
    {N2a, [{merge_part_ack, Id, 1}]} = deliver(n1, [First], N2),
    {N2b, Sent} = ticks(7, N2a),
    ?assertNot(lists:member({snapshot_req}, Sent)),
    {N2c, Later} = ticks(60, N2b),
    ?assertEqual({merge_part_ack, Id, 1}, hd([M || M = {merge_part_ack, _, _} <- Later])),
    ?assert(lists:member({snapshot_req}, Later)),
    %% n1 has since deleted two keys of the first part, and sends its snapshot whole
    N1w = ready(lists:seq(3, 12), #{part_keys => infinity}),
    {_, [Whole = {snapshot, #{delivered := _}}]} = deliver(n2, [{snapshot_req}], N1w),
    {N2d, _} = deliver(n1, [Whole], N2c),
    ?assertEqual(rows(N1w), rows(N2d)).

%% A copy already installed that is sent the first part of a snapshot in parts tells the
%% sender, which sends no more of it.
a_copy_ready_tells_the_sender_to_stop_test() ->
    N1 = ready(lists:seq(1, 12), #{}),
    {N1a, [First = {snapshot, #{parts := {Id, 3}}}]} = deliver(n2, [{snapshot_req}], N1),
    Ready = ready([], #{}),
    {_, [Gone = {merge_part_gone, Id}]} = deliver(n1, [First], Ready),
    {_, Sent} = deliver(n2, [Gone, {merge_part_ack, Id, 1}], N1a),
    ?assertEqual([], [P || P = {merge_part, _, _, _} <- Sent]).

%% A copy reading its parts at once (the cluster speaks the previous wire version), and a
%% table whose rows fit in one part, send their snapshots whole.
a_snapshot_goes_whole_when_parts_cannot_test() ->
    Whole = fun(N1) ->
                    {_, [{snapshot, S}]} = deliver(n2, [{snapshot_req}], N1),
                    is_map_key(delivered, S) andalso not is_map_key(parts, S)
            end,
    ?assert(Whole(ready(lists:seq(1, 12), #{parts_late => false}))),
    ?assert(Whole(ready(lists:seq(1, 4), #{}))),
    ?assertNot(Whole(ready(lists:seq(1, 5), #{}))).

%% A last part of another shape is dropped and the transfer given up: the copy stays
%% syncing and asks again.
a_bad_last_part_gives_the_transfer_up_test() ->
    N1 = ready(lists:seq(1, 8), #{}),
    N2 = syncing(#{}),
    {_, [First = {snapshot, #{parts := {Id, 2}}}]} = deliver(n2, [{snapshot_req}], N1),
    {N2a, _} = deliver(n1, [First], N2),
    {N2b, Effs} = hm_ec_table:handle(n1, c,
                                     {merge_part, Id, 2, term_to_binary({[], [], not_a_tail})},
                                     N2a),
    ?assertMatch([_], [D || {drop, D} <- Effs]),
    ?assertMatch(#{status := syncing}, hm_ec_table:info([n1, n2], N2b)),
    {_, Sent} = ticks(1, N2b),
    ?assert(lists:member({snapshot_req}, Sent)).

%% n1, alone when it took keys `Keys' up and folded them as stable, then with `Members'.
settled(Keys, Members, Extra) ->
    {T, _} = ticks_as(n1, [n1], 3, hm_ec_table:set_members([n1], ready(Keys, Extra))),
    hm_ec_table:set_members(Members, T).

ticks_as(Self, Up, N, T) ->
    lists:foldl(fun(_, {Tx, Out}) ->
                        {Ty, Effs} = hm_ec_table:tick(Up, Tx),
                        {Ty, Out ++ [M || {send, To, M} <- Effs, To =/= Self]}
                end, {T, []}, lists:seq(1, N)).

%% The state `T' sends member `From' that asks for one with its delivered vector `V'.
state_for(From, V, T) ->
    {_, Effs} = hm_ec_table:handle(From, c, {merge_req, V}, T),
    hd([S || {send, To, {merge, S}} <- Effs, To =:= From]).

%% `T2' installs `T1''s snapshot, whole or in parts: `T2' then.
transfer(T1, T2) -> shuttle(deliver(n2, [{snapshot_req}], T1), T2).

shuttle({T1, []}, T2) -> {T1, T2};
shuttle({T1, ToN2}, T2) ->
    {T2a, ToN1} = deliver(n1, ToN2, T2),
    case ToN1 of
        [] -> {T1, T2a};
        _ -> shuttle(deliver(n2, ToN1, T1), T2a)
    end.

%% The keys a state holds, `left_out' the others (`all' when it leaves none out).
state_keys(#{rows := {left_out, _, {keys, Keys}}, meta := Meta}) ->
    lists:usort(Keys ++ [K || {K, _} <- Meta]);
state_keys(#{rows := {left_out, _, KeyRows}, meta := Meta}) ->
    lists:usort([K || {K, _} <- KeyRows ++ Meta]);
state_keys(#{rows := Rows}) when is_list(Rows) -> all.

%% A copy that installed a member's snapshot sends a member that asks for its state only
%% the keys it may lack, as its sender would: the snapshot carries what its sender folded,
%% and the copy's log is its sender's. Without it the copy would send its whole table
%% until every operation of the snapshot is stable everywhere (when it was added just
%% before a cut, the whole cut), and a large table's whole state costs seconds and GBs.
%% Whole and in parts alike; a key written since is among those it sends.
an_installed_copy_sends_only_the_keys_a_member_lacks_test() ->
    [begin
         N1 = settled(lists:seq(1, 12), [n1, n2, n3], Extra),
         {N2s, _} = hm_ec_table:new(opts(n2, [n1, n2, n3], Extra)),
         {_, N2} = transfer(N1, N2s),
         ?assertMatch(#{status := ready}, hm_ec_table:info([n1, n2], N2)),
         ?assertEqual([], state_keys(state_for(n3, delivered(N1), N2))),
         {N2a, _} = hm_ec_table:submit({5, {write, {t, 5, again}}}, async, w, {1, [n1]}, N2),
         ?assertEqual([5], state_keys(state_for(n3, delivered(N1), N2a)))
     end || Extra <- [#{part_keys => infinity}, #{}]].
