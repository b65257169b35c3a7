%% @doc The work queue of an EC table copy (hm_ec_table_schedule): members' operations are
%% taken in the order they arrived, at most a batch per step, the rest of a message first.
-module(hm_ec_table_schedule_tests).
-include("hm_prop.hrl").
-include_lib("eunit/include/eunit.hrl").

empty_queue_gives_nothing_test() ->
    Q = hm_ec_table_schedule:new_queue(),
    ?assertEqual(0, hm_ec_table_schedule:queued(Q)),
    ?assertEqual(empty, hm_ec_table_schedule:take(32, Q)),
    ?assertEqual(0, hm_ec_table_schedule:queued(hm_ec_table_schedule:enqueue(c, a, [], Q))).

a_long_message_is_split_and_its_rest_stays_first_test() ->
    Q0 = hm_ec_table_schedule:enqueue(c, b, [x, y],
                                      hm_ec_table_schedule:enqueue(c, a, [1, 2, 3, 4, 5],
                                                                   hm_ec_table_schedule:new_queue())),
    ?assertEqual(7, hm_ec_table_schedule:queued(Q0)),
    {{c, a, [1, 2]}, Q1} = hm_ec_table_schedule:take(2, Q0),
    ?assertEqual(5, hm_ec_table_schedule:queued(Q1)),
    {{c, a, [3, 4, 5]}, Q2} = hm_ec_table_schedule:take(3, Q1),
    {{c, b, [x, y]}, Q3} = hm_ec_table_schedule:take(32, Q2),
    ?assertEqual(0, hm_ec_table_schedule:queued(Q3)),
    ?assertEqual(empty, hm_ec_table_schedule:take(32, Q3)).

batches_are_work_batch_long_test() ->
    Max = hm_ec_table_schedule:work_batch(),
    ?assertEqual([[]], hm_ec_table_schedule:batches([])),
    Ops = lists:seq(1, 2 * Max + 1),
    ?assertEqual([Max, Max, 1], [length(B) || B <- hm_ec_table_schedule:batches(Ops)]),
    ?assertEqual(Ops, lists:append(hm_ec_table_schedule:batches(Ops))).

%% Taking with any batch sizes gives back every operation once, in arrival order, never more
%% than asked for in one step, and the count of what waits stays right.
prop_take_keeps_order_and_count() ->
    ?FORALL({Msgs, Sizes}, {list({oneof([a, b, c]), non_empty(list(integer()))}),
                            non_empty(list(range(1, 40)))},
            begin
                Q = lists:foldl(fun({From, Ops}, Acc) ->
                                        hm_ec_table_schedule:enqueue(cookie, From, Ops, Acc)
                                end, hm_ec_table_schedule:new_queue(), Msgs),
                Steps = drain(Q, Sizes, Sizes, []),
                lists:append([Ops || {_, Ops} <- Msgs]) =:= lists:append([O || {_, O} <- Steps])
                    andalso lists:all(fun({N, Ops}) -> Ops =/= [] andalso length(Ops) =< N end,
                                      Steps)
            end).

%% Every step until the queue is empty: the batch size asked and the operations taken.
drain(Q, [], All, Acc) -> drain(Q, All, All, Acc);
drain(Q, [N | Ns], All, Acc) ->
    case hm_ec_table_schedule:take(N, Q) of
        empty -> 0 = hm_ec_table_schedule:queued(Q), lists:reverse(Acc);
        {{cookie, _From, Ops}, Q1} ->
            Left = hm_ec_table_schedule:queued(Q) - length(Ops),
            Left = hm_ec_table_schedule:queued(Q1),
            drain(Q1, Ns, All, [{N, Ops} | Acc])
    end.

take_keeps_order_and_count_test_() ->
    {timeout, 600, ?_assert(hm_crdt_prop:check(prop_take_keeps_order_and_count()))}.
