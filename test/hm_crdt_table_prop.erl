%% @doc PropEr properties of CRDT tables' pure core: the EC table core ({@link hm_ec_table})
%% running a CRDT per key ({@link hm_ec_crdt}) on map storage, for every type and flavor.
%%
%% `prop_converges(Type, Flavor)': 2–4 copies of one table; client updates on two keys at
%% random copies (sometimes an operation the type does not have: it must be refused with
%% `{error, {bad_op, Type, Op}}' and send nothing); the in-flight messages are delivered in
%% any order, duplicated or lost, with ticks (acknowledgements, retransmission, stability)
%% and ends of broadcast epochs (state and delta flavors send their updates then) at random
%% times. The happened-before relation of the updates is tracked by the test itself: an
%% update follows every update its node had made or delivered. Then everyone ticks and delivers until nothing is in flight. Checked: every
%% tick leaves every value as it was (stability never changes a value); at the end every copy
%% shows, per key, the value of the type's declarative specification (test/hm_spec_TYPE.erl)
%% over the key's operations and their happened-before relation; counters equal the sum of the acknowledged updates; op-flavor copies keep no
%% unstable key; values are read as the copy shows them ({@link hm_ec_table:read/2}: updates
%% whose rows are not written yet included), and once the last epoch ended every row holds
%% them. Cases per property: `PROPER_NUMTESTS' (default 300) divided by 10.
-module(hm_crdt_table_prop).
-include("hm_prop.hrl").
-include_lib("eunit/include/eunit.hrl").

-export([prop_converges/2, run/4]).

-define(NODES, {n1, n2, n3, n4}).
-define(KEYS, [k1, k2]).

numtests() -> max(5, hm_crdt_prop:numtests() div 10).

step(Spec) ->
    frequency([{4, {op, range(1, 4), elements(?KEYS), Spec:gen_op()}},
               {1, {op, range(1, 4), elements(?KEYS), not_an_op}},
               {6, {deliver, non_neg_integer()}},
               {1, {dup, non_neg_integer()}},
               {1, {drop, non_neg_integer()}},
               {2, {tick, range(1, 4)}},
               {2, {epoch, range(1, 4)}}]).

prop_converges(Type, Flavor) ->
    Spec = hm_spec:spec_module(Type),
    ?FORALL({N, Steps}, {range(2, 4), list(step(Spec))},
            begin
                Res = run(Type, Flavor, N, Steps),
                ?WHENFAIL(io:format(user, "~p ~p: ~p~n", [Type, Flavor, Res]), Res =:= ok)
            end).

%% @doc Run a schedule; `ok' or what failed.
-spec run(hm_crdt:type(), hm_crdt:flavor(), pos_integer(), list()) -> term().
run(Type, Flavor, N, Steps) ->
    Nodes = [element(I, ?NODES) || I <- lists:seq(1, N)],
    try
        {Ts, Net} = lists:foldl(
                      fun(Nd, {Acc, NetAcc}) ->
                              {T, Effs} = hm_ec_table:new(
                                            #{tab => t, type => pawset, policy => term_order,
                                              record => {t, 3}, cookie => c, node => Nd,
                                              incarnation => 1, members => Nodes,
                                              store => hm_ec_store_map:new(set, ram),
                                              crdt => {Type, Flavor}}),
                              {Acc#{Nd => T}, NetAcc ++ sends(Nd, Effs)}
                      end, {#{}, []}, Nodes),
        S0 = #{type => Type, flavor => Flavor, nodes => Nodes, t => Ts, net => Net,
               hist => #{}, acked => [], next => 1,
               %% per node: the ids of the updates it has seen, and those it has not sent yet
               seen => maps:from_list([{Nd, []} || Nd <- Nodes]),
               unsent => maps:from_list([{Nd, []} || Nd <- Nodes]),
               %% the update ids each broadcast message carries, by its dot
               carried => #{}},
        S1 = quiesce(S0, 10),                   % the copies of a new table release each other
        S2 = lists:foldl(fun exec/2, S1, Steps),
        S3 = quiesce(S2, 30),
        check(S3)
    catch throw:Why -> Why;
          Class:Reason:Stack -> {crashed, Class, Reason, lists:sublist(Stack, 5)}
    end.

sends(From, Effs) -> [{From, To, M} || {send, To, M} <- Effs].

node_at(I, #{nodes := Nodes}) -> lists:nth((I - 1) rem length(Nodes) + 1, Nodes).

exec({op, I, Key, Op}, S = #{t := Ts, hist := H, acked := A, type := Type, next := Id,
                             seen := Seen, unsent := Unsent}) ->
    Nd = node_at(I, S),
    {T1, Effs} = hm_ec_table:submit({Key, {update, Op}}, async, from, {0, []},
                                    maps:get(Nd, Ts)),
    case [R || {reply, from, R} <- Effs] of
        [ok] ->
            %% the op flavor sends it at once, the others when the epoch ends
            Past = maps:get(Nd, Seen),
            Item = {Id, hm_tcsb:self(hm_ec_table:tcsb(T1)), Op, Past},
            S1 = S#{t := Ts#{Nd := T1}, hist := H#{Key => [Item | maps:get(Key, H, [])]},
                    acked := [{Key, Op} | A], next := Id + 1,
                    seen := Seen#{Nd := [Id | Past]},
                    unsent := Unsent#{Nd := maps:get(Nd, Unsent) ++ [Id]}},
            sent(Nd, Effs, S1);
        [{error, {bad_op, Type, Op}}] ->
            [throw({sent_a_bad_op, Op}) || {send, _, _} <- Effs],
            hm_crdt:is_op(Type, Op) andalso throw({good_op_refused, Op}),
            S#{t := Ts#{Nd := T1}};
        Other -> throw({unexpected_reply, Op, Other})
    end;
exec({epoch, I}, S = #{t := Ts}) ->
    Nd = node_at(I, S),
    {T1, Effs} = hm_ec_table:timeout(crdt_epoch, maps:get(Nd, Ts)),
    sent(Nd, Effs, S#{t := Ts#{Nd := T1}});
exec({deliver, _}, S = #{net := []}) -> S;
exec({deliver, K}, S = #{net := Net}) ->
    M = lists:nth(K rem length(Net) + 1, Net),
    deliver(M, S#{net := lists:delete(M, Net)});
exec({dup, _}, S = #{net := []}) -> S;
exec({dup, K}, S = #{net := Net}) ->
    deliver(lists:nth(K rem length(Net) + 1, Net), S);
exec({drop, _}, S = #{net := []}) -> S;
exec({drop, K}, S = #{net := Net}) ->
    S#{net := lists:delete(lists:nth(K rem length(Net) + 1, Net), Net)};
exec({tick, I}, S) -> tick(node_at(I, S), S).

%% The effects of a submit or an epoch's end at `Nd': a new broadcast message carries the
%% node's unsent updates.
sent(Nd, Effs, S = #{net := Net, unsent := Unsent, carried := Carried}) ->
    Out = sends(Nd, Effs),
    case [{O, maps:get(O, VTs)} || {_, _, {op, {O, VTs, _}}} <- Out] of
        [] -> S#{net := Net ++ Out};
        [Dot | _] -> S#{net := Net ++ Out, unsent := Unsent#{Nd := []},
                        carried := Carried#{Dot => maps:get(Nd, Unsent)}}
    end.

deliver({From, To, Msg}, S = #{t := Ts, net := Net, seen := Seen, carried := Carried}) ->
    T0 = maps:get(To, Ts),
    {T1, Effs} = hm_ec_table:handle(From, c, Msg, T0),
    [throw({dropped, To, D}) || {drop, D} <- Effs],
    %% the updates of every message delivered by this step are seen at `To' now
    Before = hm_tcsb:delivered(hm_ec_table:tcsb(T0)),
    New = [Id || {O, N} <- maps:to_list(hm_tcsb:delivered(hm_ec_table:tcsb(T1))),
                 Seq <- lists:seq(hm_vv:get(O, Before) + 1, N),
                 Id <- maps:get({O, Seq}, Carried, [])],
    S#{t := Ts#{To := T1}, net := Net ++ sends(To, Effs),
       seen := Seen#{To := New ++ maps:get(To, Seen)}}.

tick(Nd, S = #{t := Ts, net := Net, nodes := Nodes}) ->
    T = maps:get(Nd, Ts),
    Before = values(T),
    {T1, Effs} = hm_ec_table:tick(Nodes, T),
    [throw({tick_changed_value, Nd, Before, values(T1)}) || values(T1) =/= Before],
    S#{t := Ts#{Nd := T1}, net := Net ++ sends(Nd, Effs)}.

%% Ticks and deliveries until nothing is in flight and every copy is ready, with nothing
%% buffered and nothing left unstable.
quiesce(S, 0) -> throw({no_quiescence, [{Nd, hm_ec_table:info([], T)}
                                        || {Nd, T} <- maps:to_list(maps:get(t, S))]});
quiesce(S = #{nodes := Nodes}, Rounds) ->
    S0 = lists:foldl(fun(I, Acc) -> exec({epoch, I}, Acc) end, S, lists:seq(1, length(Nodes))),
    S1 = flush(lists:foldl(fun tick/2, S0, Nodes), 10000),
    case all_quiet(S1) of
        true -> S1;
        false -> quiesce(S1, Rounds - 1)
    end.

all_quiet(#{t := Ts}) -> lists:all(fun quiet/1, maps:values(Ts)).

quiet(T) ->
    #{status := St, buffered_ops := B, unstable_ops := U, unstable_keys := K,
      unsent_updates := Un, unwritten_keys := W} = hm_ec_table:info([], T),
    St =:= ready andalso B =:= 0 andalso U =:= 0 andalso K =:= 0 andalso Un =:= 0
        andalso W =:= 0.

flush(S = #{net := []}, _) -> S;
flush(_, 0) -> throw(message_storm);
flush(S = #{net := [M | Rest]}, K) -> flush(deliver(M, S#{net := Rest}), K - 1).

%% What reads of the copy show (hm_ec_table:read/2: its updates whose rows are not written
%% yet included).
values(T) ->
    [{K, hm_crdt:value(C)} || K <- ?KEYS, {_, _, C} <- hm_ec_table:read(K, T)].

check(#{type := Type, flavor := Flavor, t := Ts, hist := H, acked := Acked}) ->
    Spec = hm_spec:spec_module(Type),
    Empty = hm_crdt:value(hm_crdt:new(Type, Flavor)),
    Shown = [{Nd, [{K, value(K, T, Empty)} || K <- ?KEYS]} || {Nd, T} <- maps:to_list(Ts)],
    Expected = [{K, Spec:spec(history(maps:get(K, H, [])))} || K <- ?KEYS],
    Bad = [{Nd, V} || {Nd, V} <- Shown, V =/= Expected],
    Sum = counter_sum(Type, Acked),
    BadSum = [{Nd, V} || {Nd, V} <- Shown, Sum =/= none, V =/= Sum],
    Left = [{Nd, hm_ec_table:info([], T)} || Flavor =:= op, {Nd, T} <- maps:to_list(Ts),
                                             not quiet(T)],
    %% once the epochs ended, the rows hold every update (write-behind)
    Unwritten = [Nd || {Nd, T} <- maps:to_list(Ts),
                       lists:sort(hm_ec_store:rows(hm_ec_table:store(T)))
                           =/= lists:sort(hm_ec_table:rows(T))],
    case {Bad, BadSum, Left, Unwritten} of
        {[], [], [], []} -> ok;
        _ -> {failed, #{expected => Expected, not_spec => Bad, counter => {Sum, BadSum},
                        metadata_left => Left, rows_not_written => Unwritten}}
    end.

value(K, T, Empty) ->
    case hm_ec_table:read(K, T) of
        [{_, _, C}] -> hm_crdt:value(C);
        [] -> Empty
    end.

%% hm_spec's history of a key: its updates, each with the updates its node had seen (of
%% this key) when it was made.
history(Items) ->
    Ids = [Id || {Id, _, _, _} <- Items],
    [{Id, Origin, Op, sets:from_list([P || P <- Past, lists:member(P, Ids)])}
     || {Id, Origin, Op, Past} <- lists:reverse(Items)].

%% Counters: the sum of the acknowledged updates, per key.
counter_sum(Type, Acked) when Type =:= gcounter; Type =:= pncounter ->
    [{K, lists:sum([amount(Op) || {K1, Op} <- Acked, K1 =:= K])} || K <- ?KEYS];
counter_sum(_, _) -> none.

amount(increment) -> 1;
amount(decrement) -> -1;
amount({increment, N}) -> N;
amount({decrement, N}) -> -N.

converges_test_() ->
    [{timeout, 600, {lists:flatten(io_lib:format("CRDT table converges: ~p/~p", [T, F])),
                     ?_assert(proper:quickcheck(prop_converges(T, F),
                                                [{numtests, numtests()}, {to_file, user},
                                                 {max_shrinks, 100}]))}}
     || T <- hm_crdt:types(), F <- hm_crdt:flavors()].

%% A bad operation changes nothing and sends nothing; a table of records refuses CRDT
%% operations and a CRDT table refuses record writes.
refusals_test() ->
    New = fun(Crdt) ->
                  {T, _} = hm_ec_table:new(#{tab => t, type => pawset, policy => term_order,
                                             record => {t, 3}, cookie => c, node => n1,
                                             incarnation => 1, members => [n1],
                                             store => hm_ec_store_map:new(set, ram),
                                             crdt => Crdt}),
                  T
          end,
    C = New({gcounter, op}),
    {C1, E1} = hm_ec_table:submit({k, {update, {decrement, 1}}}, async, f, {0, []}, C),
    ?assertEqual([{reply, f, {error, {bad_op, gcounter, {decrement, 1}}}}], E1),
    ?assertEqual(hm_ec_store:rows(hm_ec_table:store(C)), hm_ec_store:rows(hm_ec_table:store(C1))),
    {_, E2} = hm_ec_table:submit({k, {write, {t, k, v}}}, async, f, {0, []}, C),
    ?assertEqual([{reply, f, {error, {crdt_table, t}}}], E2),
    R = New(none),
    {_, E3} = hm_ec_table:submit({k, {update, increment}}, async, f, {0, []}, R),
    ?assertEqual([{reply, f, {error, {not_crdt_table, t}}}], E3).
