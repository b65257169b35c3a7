%% @doc EUnit tests of the wire and disc formats ({@link hm_ec_wire}) and of how the table
%% core treats a disc log of another format.
-module(hm_ec_wire_tests).
-include_lib("eunit/include/eunit.hrl").

envelope_round_trip_test() ->
    Env = hm_ec_wire:envelope(t, n1, {snapshot_req}, c),
    ?assertEqual({ok, t, n1, {snapshot_req}, c}, hm_ec_wire:open(Env)).

other_versions_and_foreign_terms_are_refused_test() ->
    Env = hm_ec_wire:envelope(t, n1, {snapshot_req}, c),
    Next = hm_ec_wire:version() + 1,
    ?assertEqual({error, {unsupported_version, Next}}, hm_ec_wire:open(setelement(2, Env, Next))),
    ?assertEqual({error, not_an_envelope}, hm_ec_wire:open({hm_ec, t, n1, {snapshot_req}, c})),
    ?assertEqual({error, not_an_envelope},
                 hm_ec_wire:open(setelement(3, Env, "not a table name"))),
    ?assertEqual({error, not_an_envelope}, hm_ec_wire:open(garbage)).

%% Every version from the oldest this release reads to its own is opened, in this version's
%% shapes; an envelope is written at the version asked for.
versions_read_test() ->
    {Oldest, Newest} = hm_ec_wire:versions(),
    ?assertEqual(Newest, hm_ec_wire:version()),
    ?assert(Oldest =< Newest andalso Oldest >= Newest - 1),
    [?assertEqual({ok, t, n1, {snapshot_req}, c},
                  hm_ec_wire:open(hm_ec_wire:envelope(V, t, n1, {snapshot_req}, c)))
     || V <- lists:seq(Oldest, Newest)],
    [?assertEqual(V, element(2, hm_ec_wire:envelope(V, t, n1, {snapshot_req}, c)))
     || V <- lists:seq(Oldest, Newest)],
    ?assertEqual({error, {unsupported_version, Oldest - 1}},
                 hm_ec_wire:open({hm_ec, Oldest - 1, t, n1, {snapshot_req}, c})),
    ?assertEqual({error, {unsupported_version, x}},
                 hm_ec_wire:open({hm_ec, x, t, n1, {snapshot_req}, c})),
    ?assertError(function_clause, hm_ec_wire:envelope(Newest + 1, t, n1, {snapshot_req}, c)),
    %% until a negotiation says otherwise, a node sends at its own version
    ?assertEqual(Newest, element(2, hm_ec_wire:envelope(t, n1, {snapshot_req}, c))).

%% The version sent at is the newest every member reads; a member none of whose versions
%% this node reads is left out, the others agree among themselves.
negotiate_test() ->
    N = fun hm_ec_wire:negotiate/2,
    ?assertEqual({3, []}, N({2, 3}, [])),
    ?assertEqual({3, []}, N({2, 3}, [{a, {2, 3}}, {b, {3, 4}}])),
    %% an old node in the cluster: everyone speaks its version until it is gone
    ?assertEqual({2, []}, N({2, 3}, [{a, {2, 3}}, {old, {1, 2}}])),
    %% the old node itself (it reads 1 and 2) meets upgraded ones at 2
    ?assertEqual({2, []}, N({1, 2}, [{new, {2, 3}}])),
    %% two releases apart: nothing in common
    ?assertEqual({3, [ancient]}, N({2, 3}, [{a, {2, 3}}, {ancient, {1, 1}}])),
    ?assertEqual({3, [future]}, N({2, 3}, [{future, {4, 5}}])).

message_shapes_test() ->
    O = {n1, 1},
    Good = {O, #{O => 1}, {async, k, {write, {t, k, v}, {5, n1}}}},
    ?assert(hm_ec_wire:is_op_message(Good)),
    ?assert(hm_ec_wire:is_op_message({O, #{O => 2}, {sync, k, delete}})),
    ?assertNot(hm_ec_wire:is_op_message({O, #{O => 1}, {async, k, {write, {t, k, v}, nohlc}}})),
    ?assertNot(hm_ec_wire:is_op_message({O, #{O => 0}, {async, k, delete}})),
    ?assertNot(hm_ec_wire:is_op_message({O, #{}, {async, k, delete}})),
    ?assertNot(hm_ec_wire:is_op_message({O, #{O => 1}, {later, k, delete}})),
    %% the shape alone: everything but the vector's counters
    ?assert(hm_ec_wire:is_op_shape({O, #{O => 0}, {async, k, delete}})),
    ?assertNot(hm_ec_wire:is_op_shape({O, [], {async, k, delete}})),
    ?assertNot(hm_ec_wire:is_op_shape({O, #{O => 1}, {later, k, delete}})),
    ?assertNot(hm_ec_wire:is_op_shape({O, #{O => 1}, {async, k, {write, {t, k, v}, nohlc}}})),
    ?assert(hm_ec_wire:is_ack({ack, O, #{O => 3}, #{n1 => 1}})),
    ?assertNot(hm_ec_wire:is_ack({ack, O, [], #{}})),
    Snap = #{rows => [], meta => [], delivered => #{}, log => [], clears => []},
    ?assert(hm_ec_wire:is_snapshot({snapshot, Snap})),
    ?assertNot(hm_ec_wire:is_snapshot({snapshot, Snap#{rows := not_a_list}})),
    ?assertNot(hm_ec_wire:is_snapshot({snapshot, maps:remove(clears, Snap)})),
    %% what its sender folded, when it says
    ?assert(hm_ec_wire:is_snapshot({snapshot, Snap#{folded => #{O => 0}}})),
    ?assertNot(hm_ec_wire:is_snapshot({snapshot, Snap#{folded => [O]}})),
    State = #{rows => [{t, k, v}], meta => [{k, {[], []}}], delivered => #{O => 1},
              clears => [{{O, 1}, #{O => 1}, #{k => true}}]},
    ?assert(hm_ec_wire:is_merge({merge, State})),
    ?assertNot(hm_ec_wire:is_merge({merge, State#{rows := [k]}})),
    ?assertNot(hm_ec_wire:is_merge({merge, State#{meta := [{k}]}})),
    ?assertNot(hm_ec_wire:is_merge({merge, maps:remove(delivered, State)})),
    %% a state that left out the keys the member has: each key sent with its rows
    ?assert(hm_ec_wire:is_merge({merge, State#{rows := {left_out, #{O => 0}, [{k, []},
                                                                           {j, [{t, j, v}]}]}}})),
    ?assertNot(hm_ec_wire:is_merge({merge, State#{rows := {left_out, [], []}}})),
    ?assertNot(hm_ec_wire:is_merge({merge, State#{rows := {left_out, #{}, [{k, [j]}]}}})),
    ?assertNot(hm_ec_wire:is_merge({merge, State#{rows := {left_out, #{}, [k]}}})).

table(Store, Members) ->
    hm_ec_table:new(#{tab => t, type => pawset, policy => term_order, record => {t, 3},
                      cookie => c, node => n1, incarnation => 7, members => Members,
                      store => Store}).

%% A disc copy restores from its log when the log is of this release's format (or older than
%% the format row, same layout), and catches up from the others when it is of another one.
disc_log_format_test() ->
    Self = {n1, 3},
    Delivered = #{Self => 2},
    Disc = fun(Format) ->
                   St0 = hm_ec_store:log_put(state, {Self, Delivered},
                                             hm_ec_store_map:new(set, disc)),
                   case Format of
                       none -> St0;
                       V -> hm_ec_store:log_put(format, V, St0)
                   end
           end,
    {T1, _} = table(Disc(hm_ec_wire:disc_version()), [n1, n2]),
    ?assertEqual(ready, hm_ec_table:status(T1)),
    ?assertEqual({{n1, 7}, Delivered},
                 {hm_tcsb:self(hm_ec_table:tcsb(T1)), hm_tcsb:delivered(hm_ec_table:tcsb(T1))}),
    {T2, _} = table(Disc(none), [n1, n2]),
    ?assertEqual(Delivered, hm_tcsb:delivered(hm_ec_table:tcsb(T2))),
    ?assertMatch([_], [F || {format, F} <- hm_ec_store:log_read(hm_ec_table:store(T2))]),
    {T3, Effs} = table(Disc(hm_ec_wire:disc_version() + 1), [n1, n2]),
    ?assertEqual(syncing, hm_ec_table:status(T3)),
    ?assertEqual({n1, 7}, hm_tcsb:self(hm_ec_table:tcsb(T3))),
    ?assert(lists:member({send, n2, {snapshot_req}}, Effs)),
    ?assertEqual([{format, hm_ec_wire:disc_version()}],
                 hm_ec_store:log_read(hm_ec_table:store(T3))).

%% A sync_ec write on a disc copy is on disc before any member hears of it: a crash that
%% keeps only what was synced keeps it. An async_ec write is not synced at once, but before
%% the copy acknowledges anything.
disc_sync_write_durable_before_sent_test() ->
    Disc = hm_ec_store:log_put(state, {{n1, 3}, #{}}, hm_ec_store_map:new(set, disc)),
    {T, _} = table(Disc, [n1, n2]),
    {T1, _} = hm_ec_table:submit({k, {write, {t, k, v}}}, sync, from, {1, [n2]}, T),
    St1 = hm_ec_table:store(T1),
    ?assertEqual(0, hm_ec_store_map:unsynced(St1)),
    ?assertEqual([{t, k, v}], hm_ec_store:read(k, hm_ec_store_map:durable(St1, 0))),
    {T2, _} = hm_ec_table:submit({j, {write, {t, j, v}}}, async, from, {1, [n2]}, T1),
    ?assertEqual([], hm_ec_store:read(j, hm_ec_store_map:durable(hm_ec_table:store(T2), 0))),
    {T3, Effs} = hm_ec_table:tick([n2], T2),
    ?assertMatch([_ | _], [A || {send, n2, A = {ack, _, _, _}} <- Effs]),
    ?assertEqual([{t, j, v}],
                 hm_ec_store:read(j, hm_ec_store_map:durable(hm_ec_table:store(T3), 0))).

%% A disc copy restarts from its state as a new incarnation: its last operations may not have
%% reached the disc, and members that have them would drop new ones under the same numbers.
disc_restart_is_a_new_incarnation_test() ->
    Disc = hm_ec_store:log_put(state, {{n1, 3}, #{{n1, 3} => 5}},
                               hm_ec_store_map:new(set, disc)),
    {T, _} = table(Disc, [n1, n2]),
    ?assertEqual(ready, hm_ec_table:status(T)),
    ?assertEqual({n1, 7}, hm_tcsb:self(hm_ec_table:tcsb(T))),
    ?assertEqual(#{{n1, 3} => 5}, hm_tcsb:delivered(hm_ec_table:tcsb(T))),
    {_, Effs} = hm_ec_table:submit({k, {write, {t, k, v}}}, async, from, {1, [n2]}, T),
    ?assertMatch([{send, n2, {op, {{n1, 7}, #{{n1, 3} := 5, {n1, 7} := 1}, _}}}],
                 [E || E = {send, _, _} <- Effs]),
    %% a clock set back still gives a newer incarnation
    Later = hm_ec_store:log_put(state, {{n1, 9}, #{}}, hm_ec_store_map:new(set, disc)),
    {T9, _} = table(Later, [n1, n2]),
    ?assertEqual({n1, 10}, hm_tcsb:self(hm_ec_table:tcsb(T9))).

%% The states a copy sends (a snapshot for a copy that syncs, its state for a member that
%% catches up) are state transfers, which wait for room on a busy connection; its
%% operations and acknowledgements are not.
state_transfer_test() ->
    {T0, _} = table(hm_ec_store_map:new(set, ram), [n1]),
    {T, Writes} = hm_ec_table:submit({k, {write, {t, k, v}}}, async, from, {1, [n2]},
                                     hm_ec_table:set_members([n1, n2], T0)),
    {_, Snap} = hm_ec_table:handle(n2, c, {snapshot_req}, T),
    {_, Acks} = hm_ec_table:acknowledge([n2], T),
    Sent = fun(Effs) -> [M || {send, n2, M} <- Effs] end,
    ?assertMatch([{snapshot, _}], Sent(Snap)),
    ?assert(lists:all(fun hm_ec_wire:is_state_transfer/1, Sent(Snap))),
    ?assertMatch([_ | _], Sent(Writes) ++ Sent(Acks)),
    ?assertNot(lists:any(fun hm_ec_wire:is_state_transfer/1, Sent(Writes) ++ Sent(Acks))),
    ?assert(hm_ec_wire:is_state_transfer({merge, #{}})),
    ?assertNot(hm_ec_wire:is_state_transfer({merge_none})),
    ?assertNot(hm_ec_wire:is_state_transfer({snapshot_none})).

%% A snapshot in parts goes to no member of the previous release (whose copies would take
%% its first part for a bad snapshot): it says it has none, and the copy asks again. A whole
%% snapshot, a state read late and any other message go as they are. The last part of a
%% snapshot in parts carries a vector, a log and clears; a state's, a vector.
a_snapshot_in_parts_is_not_sent_at_the_previous_version_test() ->
    Parts = {snapshot, #{rows => [{k, [{t, k, v}]}], meta => [], parts => {id, 3}}},
    ?assert(hm_ec_wire:is_snapshot(Parts)),
    ?assertEqual({snapshot_none}, hm_ec_wire:downgrade(3, Parts)),
    ?assertEqual(Parts, hm_ec_wire:downgrade(4, Parts)),
    Whole = {snapshot, #{rows => [], meta => [], delivered => #{}, log => [], clears => []}},
    ?assertEqual(Whole, hm_ec_wire:downgrade(3, Whole)),
    Late = {merge, #{rows => {left_out, #{}, []}, meta => [], delivered => #{{n1, 1} => 3},
                     clears => [], parts => {id, 3}, late => true}},
    ?assert(hm_ec_wire:is_merge(Late)),
    ?assertEqual(Late, hm_ec_wire:downgrade(3, Late)),
    ?assert(hm_ec_wire:is_merge_part([{k, []}], [], #{{n1, 1} => 3})),
    ?assertNot(hm_ec_wire:is_merge_part([{k, []}], [], not_a_vector)),
    ?assert(hm_ec_wire:is_snapshot_part([{k, []}], [],
                                        #{delivered => #{}, log => [], clears => []})),
    ?assertNot(hm_ec_wire:is_snapshot_part([{k, []}], [], #{{n1, 1} => 3})),
    ?assertNot(hm_ec_wire:is_snapshot_part([{k, []}], [], #{delivered => #{}, log => [],
                                                            clears => [], folded => x})),
    ?assertNot(hm_ec_wire:is_snapshot({snapshot, #{rows => [], meta => [], parts => {id, 1}}})).
