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
