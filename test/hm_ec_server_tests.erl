%% @doc EUnit tests of {@link hm_ec_server}'s passing on of a write to the holders of a table
%% this node has no ready copy of.
-module(hm_ec_server_tests).
-include_lib("eunit/include/eunit.hrl").

%% A holder stand-in registered under the table process name: it answers every write with
%% `Reply' and reports each one to the test.
holder(Tab, Reply) ->
    count(0),                                   % nothing left from an earlier test
    Test = self(),
    Pid = spawn(fun() -> holder_loop(Test, Reply) end),
    true = register(hm_ec_table_server:name(Tab), Pid),
    Pid.

holder_loop(Test, Reply) ->
    receive
        {'$gen_call', From, Req} ->
            Test ! {took, Req},
            gen_server:reply(From, Reply),
            holder_loop(Test, Reply);
        stop -> ok
    end.

took() -> receive {took, _} -> 1 after 0 -> 0 end.
count(N) -> case took() of 0 -> N; 1 -> count(N + 1) end.

%% A sync write a holder applied, whose wait for the other copies timed out, is applied: it
%% is not handed to the next holder too (a counter would count it twice); the caller gets
%% the timeout, as for a write on its own copy.
sync_timeout_is_not_passed_on_test() ->
    Tab = hm_ec_server_tests_tab,
    Pid = holder(Tab, {error, {sync_timeout, [n2]}}),
    try
        KeyOp = {k, {write, {Tab, k, v}}},
        ?assertEqual({error, {sync_timeout, [n2]}},
                     hm_ec_server:to_holders([node(), node()], Tab, KeyOp, sync)),
        ?assertEqual(1, count(0))
    after
        Pid ! stop, unregister(hm_ec_table_server:name(Tab))
    end.

%% A holder that did not take the write (catching up) passes it to the next one.
not_taken_is_passed_on_test() ->
    Tab = hm_ec_server_tests_tab2,
    Pid = holder(Tab, {error, {syncing, Tab}}),
    try
        ?assertEqual(unreachable,
                     hm_ec_server:to_holders([node(), node()], Tab, {k, delete}, async)),
        ?assertEqual(2, count(0))
    after
        Pid ! stop, unregister(hm_ec_table_server:name(Tab))
    end.
