%% @doc EUnit tests of CRDT tables' write-behind in the per-table core ({@link hm_ec_table}
%% on map storage, {@link hm_ec_store_map}): a key's state stays in the core between the
%% ends of broadcast epochs (the ChiaVe paper, *ChiaVe: A Flexible CRDT-Based Key-Value
%% Store*, §4: propagation per epoch), reads of the copy see every update it applied, its
%% row is written when the epoch ends, and a disc copy that crashes keeping any prefix of its
%% writes since the last sync restarts with a state that holds every update its durable
%% delivered vector counts (the Hypermnesia paper, *Hypermnesia: Eventual Consistency in
%% Mnesia*, §4.9: the durable log).
%%
%% Invariants checked: `hm_ec_table:read/2' shows every update applied; the store's row
%% lacks them until the epoch ends and holds them after, with no key left marked; one epoch
%% timer per epoch; after a crash cut anywhere the restored value is the value of a prefix
%% of the updates, at least those the durable log counts, all of them when the whole log was
%% kept, and a longer kept prefix never shows less.
-module(hm_ec_crdt_write_behind_tests).
-include_lib("eunit/include/eunit.hrl").

new(Flavor, Storage) -> new(Flavor, Storage, hm_ec_store_map:new(set, Storage), 1).

new(Flavor, _Storage, Store, Inc) ->
    {T, Effs} = hm_ec_table:new(#{tab => t, type => pawset, policy => term_order,
                                  record => {t, 3}, cookie => c, node => n1,
                                  incarnation => Inc, members => [n1], store => Store,
                                  crdt => {awset, Flavor}, epoch => 100}),
    {T, Effs}.

add(T, I) ->
    {T1, Effs} = hm_ec_table:submit({k, {update, {add, I}}}, async, from, {0, [n1]}, T),
    ?assert(lists:member({reply, from, ok}, Effs)),
    {T1, Effs}.

value(T) ->
    {ok, V} = hm_ec_table:crdt_value(k, T),
    V.

row_value(T) ->
    case hm_ec_store:read(k, hm_ec_table:store(T)) of
        [{t, k, C}] -> hm_crdt:value(C);
        [] -> []
    end.

epoch(T) -> element(1, hm_ec_table:timeout(crdt_epoch, T)).

timers(Effs) -> [M || {timer, _, M = crdt_epoch} <- Effs].

%% Reads see the updates; the row and the mark follow the epoch.
reads_see_unwritten_updates_test_() ->
    [{atom_to_list(F), fun() -> reads_see_unwritten(F) end} || F <- [op, state, delta]].

reads_see_unwritten(Flavor) ->
    {T0, _} = new(Flavor, ram),
    {T1, E1} = add(T0, 1),
    %% the first update of an epoch sets its timer, the next ones do not
    ?assertEqual([crdt_epoch], timers(E1)),
    {T2, E2} = add(T1, 2),
    ?assertEqual([], timers(E2)),
    ?assertEqual([1, 2], value(T2)),
    ?assertMatch([{t, k, _}], hm_ec_table:read(k, T2)),
    ?assertEqual([], row_value(T2)),                       % not written yet
    ?assertEqual([k], hm_ec_store_map:unwritten(hm_ec_table:store(T2))),
    ?assertEqual(1, maps:get(unwritten_keys, hm_ec_table:info([], T2))),
    %% the epoch ends: the row holds every update, the mark is gone
    T3 = epoch(T2),
    ?assertEqual([1, 2], row_value(T3)),
    ?assertEqual([1, 2], value(T3)),
    ?assertEqual([], hm_ec_store_map:unwritten(hm_ec_table:store(T3))),
    ?assertEqual(0, maps:get(unwritten_keys, hm_ec_table:info([], T3))),
    ?assertEqual(lists:sort(hm_ec_store:rows(hm_ec_table:store(T3))),
                 lists:sort(hm_ec_table:rows(T3))),
    %% the next epoch's first update sets a timer again
    {T4, E4} = add(T3, 3),
    ?assertEqual([crdt_epoch], timers(E4)),
    ?assertEqual([1, 2, 3], value(T4)),
    ?assertEqual([1, 2], row_value(T4)),
    {ok, []} = hm_ec_table:crdt_value(other, T4).

%% A member's snapshot request is answered with every update, rows written first.
snapshot_holds_unwritten_test() ->
    {T0, _} = new(op, ram),
    {T1, _} = add(element(1, add(T0, 1)), 2),
    {T2, Effs} = hm_ec_table:handle(n1, c, {snapshot_req}, T1),
    [{send, n1, {snapshot, #{rows := [{t, k, C}]}}}] = Effs,
    ?assertEqual([1, 2], hm_crdt:value(C)),
    ?assertEqual([1, 2], row_value(T2)),
    ?assertEqual([], hm_ec_store_map:unwritten(hm_ec_table:store(T2))).

%% Ticks fold stability into the key in memory (op flavor) without changing its value.
tick_keeps_value_test() ->
    {T0, _} = new(op, ram),
    {T1, _} = add(element(1, add(T0, 1)), 2),
    {T2, _} = hm_ec_table:tick([n1], T1),
    ?assertEqual([1, 2], value(T2)),
    {T3, _} = hm_ec_table:tick([n1], epoch(T2)),
    ?assertEqual([1, 2], row_value(T3)),
    [{t, k, C}] = hm_ec_table:read(k, T3),
    ?assertEqual(0, hm_crdt:metadata(C)),
    ?assertEqual(0, maps:get(unstable_keys, hm_ec_table:info([], T3))).

%% A disc copy's crash keeps any prefix of its writes since the last sync.
crash_anywhere_test_() ->
    [{atom_to_list(F), {timeout, 60, fun() -> crash_anywhere(F) end}}
     || F <- [op, state, delta]].

crash_anywhere(Flavor) ->
    N = 40,
    {T0, _} = new(Flavor, disc),
    %% updates with epoch ends and ticks (stability, which forgets logged operations and
    %% syncs) between them; the last few after the last sync
    T1 = lists:foldl(fun(I, T) ->
                             {Ta, _} = add(T, I),
                             Tb = case I rem 7 of 0 -> epoch(Ta); _ -> Ta end,
                             case I rem 11 =:= 0 andalso I < N - 5 of
                                 true -> element(1, hm_ec_table:tick([n1], Tb));
                                 false -> Tb
                             end
                     end, T0, lists:seq(1, N)),
    ?assertEqual(lists:seq(1, N), value(T1)),
    St = hm_ec_table:store(T1),
    Unsynced = hm_ec_store_map:unsynced(St),
    ?assert(Unsynced > 0),
    Sizes = [restored(Flavor, hm_ec_store_map:durable(St, Kept)) || Kept <- lists:seq(0, Unsynced)],
    %% a longer prefix of the writes never shows less; the whole log shows everything
    ?assertEqual(Sizes, lists:sort(Sizes)),
    ?assertEqual(N, lists:last(Sizes)).

%% The value a copy restarted on `D' shows: a prefix of the updates (1..M), holding every
%% update its durable log counts, the same once its next epoch ended, with every row
%% written then. Returns M.
restored(Flavor, D) ->
    Counted = counted(Flavor, hm_ec_store:log_read(D)),
    {T, _} = new(Flavor, disc, D, 2),
    V = value(T),
    M = length(V),
    ?assertEqual(lists:seq(1, M), V),
    ?assert(M >= Counted),
    T1 = epoch(T),
    ?assertEqual(V, value(T1)),
    ?assertEqual(V, row_value(T1)),
    M.

%% How many updates the durable log says this copy had: op, the delivered vector (one
%% operation per update); delta, the updates of the delivered epochs still logged and the
%% unsent ones (older epochs were forgotten once stable: at least these); state, the largest
%% state among those (an epoch carries each key's last state).
counted(op, Log) ->
    case lists:keyfind(state, 1, Log) of
        {state, {Self, V}} -> hm_vv:get(Self, V);
        false -> 0
    end;
counted(Flavor, Log) ->
    Unsent = [P || {crdt_batch, Us} <- Log, {_, P} <- Us],
    Sent = case lists:keyfind(state, 1, Log) of
               {state, {_, V}} ->
                   [P || {Dot, {_, _, {_, _, {crdt, {batch, Ps}}}}} <- Log, is_tuple(Dot),
                         hm_vv:contains(Dot, V), {_, P} <- Ps];
               false -> []
           end,
    case Flavor of
        delta -> length(Unsent) + length(Sent);
        state -> lists:max([0 | [length(hm_crdt:value(hm_crdt:deliver(Ev, hm_crdt:new(awset, state))))
                                 || {event, Ev} <- Unsent ++ Sent]])
    end.

%% A delta table's epoch sends each key's deltas joined into one delta-interval (*Delta
%% State Replicated Data Types*, Definition 4): one join per key and epoch at the other
%% copies, which show every update.
delta_epoch_sends_intervals_test() ->
    Copy = fun(Node) ->
                   {T, _} = hm_ec_table:new(#{tab => t, type => pawset, policy => term_order,
                                              record => {t, 3}, cookie => c, node => Node,
                                              incarnation => 1, members => [n1, n2],
                                              store => hm_ec_store_map:new(set, ram),
                                              crdt => {awset, delta}, epoch => 100}),
                   Other = hd([n1, n2] -- [Node]),
                   element(1, hm_ec_table:handle(Other, c, {snapshot_empty}, T))
           end,
    Up = fun(K, Op, T) ->
                 {T1, Effs} = hm_ec_table:submit({K, {update, Op}}, async, from, {0, [n1, n2]}, T),
                 ?assert(lists:member({reply, from, ok}, Effs)),
                 T1
         end,
    T1 = lists:foldl(fun(Op, T) -> Up(k, Op, T) end, Copy(n1),
                     [{add, 1}, {add, 2}, {remove, 1}, {add, 3}]),
    T2 = Up(j, {add, x}, T1),
    {_, Effs} = hm_ec_table:timeout(crdt_epoch, T2),
    [Msg = {_, _, {async, _, {crdt, {batch, Pairs}}}}] = [M || {send, n2, {op, M}} <- Effs],
    ?assertMatch([{k, {interval, _}}, {j, {event, _}}], Pairs),
    {R2, _} = hm_ec_table:handle(n1, c, {op, Msg}, Copy(n2)),
    ?assertEqual({ok, [2, 3]}, hm_ec_table:crdt_value(k, R2)),
    ?assertEqual({ok, [x]}, hm_ec_table:crdt_value(j, R2)).
