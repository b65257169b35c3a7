%% @doc EUnit tests of {@link hm_ec_outbox}: `async' operations bound for a member are held
%% and leave together; everything else leaves at once, behind them; every member receives
%% the messages given to it, in order, whatever the interleaving of sends and flushes.
-module(hm_ec_outbox_tests).
-include_lib("eunit/include/eunit.hrl").

op(Mode, I) -> {op, {{n1, 1}, #{{n1, 1} => I}, {Mode, k, {crdt, {op, {add, I}}}}}}.
msg({op, M}) -> M.

held_then_flushed_together_test() ->
    B0 = hm_ec_outbox:new(),
    {[], B1} = hm_ec_outbox:send(n2, op(async, 1), B0),
    {[], B2} = hm_ec_outbox:send(n2, op(async, 2), B1),
    {[], B3} = hm_ec_outbox:send(n3, op(async, 1), B2),
    ?assertEqual(3, hm_ec_outbox:held(B3)),
    ?assertNot(hm_ec_outbox:is_empty(B3)),
    {Out, B4} = hm_ec_outbox:flush(B3),
    ?assertEqual([{n2, {ops, [msg(op(async, 1)), msg(op(async, 2))]}},
                  {n3, op(async, 1)}], Out),
    ?assert(hm_ec_outbox:is_empty(B4)),
    ?assertEqual({[], B4}, hm_ec_outbox:flush(B4)).

other_messages_leave_at_once_behind_held_ones_test() ->
    {[], B1} = hm_ec_outbox:send(n2, op(async, 1), hm_ec_outbox:new()),
    Ack = {ack, {n1, 1}, #{}, #{}},
    ?assertEqual({[{n2, op(async, 1)}, {n2, Ack}], hm_ec_outbox:new()},
                 hm_ec_outbox:send(n2, Ack, B1)),
    %% another member's held operations stay held
    {[], B2} = hm_ec_outbox:send(n3, op(async, 2), B1),
    {Out3, B3} = hm_ec_outbox:send(n2, Ack, B2),
    ?assertEqual([{n2, op(async, 1)}, {n2, Ack}], Out3),
    ?assertEqual(1, hm_ec_outbox:held(B3)),
    %% a sync operation's caller waits for the members: it is not held either
    ?assertEqual({[{n3, op(async, 2)}, {n3, op(sync, 3)}], hm_ec_outbox:new()},
                 hm_ec_outbox:send(n3, op(sync, 3), B3)).

a_full_group_leaves_at_once_test() ->
    {Outs, B} = lists:foldl(fun(I, {Acc, Bx}) ->
                                    {Out, By} = hm_ec_outbox:send(n2, op(async, I), Bx),
                                    {Acc ++ Out, By}
                            end, {[], hm_ec_outbox:new()}, lists:seq(1, 600)),
    ?assertMatch([{n2, {ops, _}}, {n2, {ops, _}}], Outs),
    [{n2, {ops, G1}}, {n2, {ops, G2}}] = Outs,
    ?assertEqual(256, length(G1)),
    ?assertEqual([msg(op(async, I)) || I <- lists:seq(1, 512)], G1 ++ G2),
    ?assertEqual(600 - 512, hm_ec_outbox:held(B)).

%% Random interleavings of held operations, other messages and flushes: every member
%% receives exactly what was sent to it, in order.
order_kept_test_() ->
    [{integer_to_list(Seed), fun() -> order_kept(Seed) end} || Seed <- lists:seq(1, 100)].

order_kept(Seed) ->
    rand:seed(exsss, {Seed, 7, 11}),
    Steps = [step(I) || I <- lists:seq(1, 300 + rand:uniform(700))],
    {Out, Box} = lists:foldl(fun(flush, {Acc, B}) ->
                                     {O, B1} = hm_ec_outbox:flush(B),
                                     {[O | Acc], B1};
                                ({To, M}, {Acc, B}) ->
                                     {O, B1} = hm_ec_outbox:send(To, M, B),
                                     {[O | Acc], B1}
                             end, {[], hm_ec_outbox:new()}, Steps),
    {Last, Empty} = hm_ec_outbox:flush(Box),
    ?assert(hm_ec_outbox:is_empty(Empty)),
    Received = lists:append(lists:reverse([Last | Out])),
    %% (the receiver takes `{ops, Ms}' as its `{op, M}' in order)
    [?assertEqual(lists:append([expand(M) || {To, M} <- Steps, To =:= N]),
                  lists:append([expand(M) || {To, M} <- Received, To =:= N]))
     || N <- [n2, n3, n4]].

step(I) ->
    case rand:uniform(20) of
        1 -> flush;
        R ->
            To = lists:nth(rand:uniform(3), [n2, n3, n4]),
            {To, case R of
                     2 -> {ack, {n1, 1}, #{}, #{}};
                     3 -> op(sync, I);
                     4 -> {ops, [msg(op(async, I))]};       % a retransmission round
                     _ -> op(async, I)
                 end}
    end.

expand({ops, [{_, _, {async, _, _}} | _] = Ms}) -> [{op, M} || M <- Ms];
expand(M) -> [M].
