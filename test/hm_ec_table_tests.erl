%% @doc EUnit tests of the per-table core ({@link hm_ec_table}) on a map store, for what the
%% simulator's checkers do not look at.
-module(hm_ec_table_tests).
-include_lib("eunit/include/eunit.hrl").

table(Members) ->
    {T, _} = hm_ec_table:new(#{tab => t, type => pawset, policy => term_order,
                               record => {t, 3}, cookie => c, node => n1, incarnation => 1,
                               members => Members, store => hm_ec_store_map:new(set, ram)}),
    T.

acks_to(N, Effs) -> [A || {send, M, A = {ack, _, _, _}} <- Effs, M =:= N].

%% An acknowledgement goes again only when it says something new (or every few ticks); a
%% member removed and added back is not a member that already heard the last one: it hears
%% it at the next tick, and the table forgets what it sent to nodes that left.
ack_to_member_added_back_test() ->
    T0 = table([n1, n2]),
    {T1, E1} = hm_ec_table:tick([n1, n2], T0),
    ?assertMatch([_], acks_to(n2, E1)),
    {T2, E2} = hm_ec_table:tick([n1, n2], T1),
    ?assertEqual([], acks_to(n2, E2)),
    T3 = hm_ec_table:set_members([n1], T2),
    T4 = hm_ec_table:set_members([n1, n2], T3),
    {_, E4} = hm_ec_table:tick([n1, n2], T4),
    ?assertMatch([_], acks_to(n2, E4)).

%% A copy that stops answers the sync_ec callers still waiting for members (as a timeout:
%% applied here and sent, not known to be everywhere), and only those.
stop_answers_sync_waiters_test() ->
    T0 = hm_ec_table:set_members([n1, n2], table([n1])),
    {T1, E1} = hm_ec_table:submit({k, {write, {t, k, 1}}}, sync, waiting, {0, [n2]}, T0),
    ?assertEqual([], [R || {reply, _, _} = R <- E1]),
    {T2, E2} = hm_ec_table:submit({j, {write, {t, j, 1}}}, async, done, {0, [n2]}, T1),
    ?assertEqual([{reply, done, ok}], [R || {reply, _, _} = R <- E2]),
    {T3, E3} = hm_ec_table:stop(T2),
    ?assertEqual([{reply, waiting, {error, {sync_timeout, [n2]}}}], E3),
    ?assertEqual({T3, []}, hm_ec_table:stop(T3)).

%% A sync_ec caller waits for every reachable member's `applied' answer; one that was lost
%% (it goes once, and a busy connection drops it) no longer holds the caller until the 30 s
%% timeout: the member's acknowledgement that it delivered the write answers the caller at
%% the next tick, and so does the member being no longer reachable, or its copy silent for
%% more than 16 ticks (not running: restarting, or its table not loaded yet).
sync_waiter_released_by_ack_test() ->
    T0 = hm_ec_table:set_members([n1, n2, n3], table([n1])),
    Ack = fun(N, V, T) -> element(1, hm_ec_table:handle(N, c, {ack, {N, 1}, V, #{}}, T)) end,
    Replies = fun(E) -> [R || {reply, _, _} = R <- E] end,
    %% n2 and n3 run
    {T1, _} = hm_ec_table:tick([n1, n2, n3], Ack(n3, #{}, Ack(n2, #{}, T0))),
    {T2, E2} = hm_ec_table:submit({k, {write, {t, k, 1}}}, sync, waiting, {0, [n2, n3]}, T1),
    [{_, Ts, _}] = [M || {send, n2, {op, M}} <- E2],
    ?assertEqual([], Replies(E2)),
    %% n2 acknowledges the write (its `applied' was lost); n3 acknowledges, without it
    {T3, E3} = hm_ec_table:tick([n1, n2, n3], Ack(n3, #{}, Ack(n2, Ts, T2))),
    ?assertEqual([], Replies(E3)),
    %% n3 is no longer reachable (its nodedown missed): the caller is answered
    {_, E4} = hm_ec_table:tick([n1, n2], T3),
    ?assertEqual([{reply, waiting, ok}], Replies(E4)),
    %% n3 reachable, but silent: the caller is answered after 16 ticks of silence, not before
    Tick = fun(X) -> element(1, hm_ec_table:tick([n1, n2, n3], Ack(n2, Ts, X))) end,
    T5 = lists:foldl(fun(_, X) -> Tick(X) end, T3, lists:seq(1, 15)),
    {T6, E6} = hm_ec_table:tick([n1, n2, n3], T5),
    ?assertEqual([], Replies(E6)),
    {_, E7} = hm_ec_table:tick([n1, n2, n3], T6),
    ?assertEqual([{reply, waiting, ok}], Replies(E7)),
    %% a member never heard from since this copy started is waited for (its next tick
    %% brings its acknowledgement, or the 30 s timeout answers)
    {T8, _} = hm_ec_table:submit({k, {write, {t, k, 2}}}, sync, again, {0, [n2, n3]}, T0),
    T9 = lists:foldl(fun(_, X) -> element(1, hm_ec_table:tick([n1, n2, n3], X)) end, T8,
                     lists:seq(1, 20)),
    {_, E10} = hm_ec_table:tick([n1, n2, n3], T9),
    ?assertEqual([], Replies(E10)).
