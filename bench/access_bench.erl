%% @doc `make bench-access': what the `async_ec' access path costs per call on one node, as
%% ratios against Mnesia's own `async_dirty' in the same run: a read and a write of a plain
%% table under `async_dirty', the same plain table read and written inside `async_ec' (a
%% table that is not an EC table must cost what it costs under `async_dirty': the access
%% module only asks whether it is an EC table), and an EC table read and written under
%% `async_ec'. Each figure is the median of 5 rounds of 100,000 calls on 1,000 keys, in ns
%% per call. Writes `bench/results/access-<yyyymmdd-hhmm>.md'.
-module(access_bench).

-export([main/1]).

-define(N, 100000).
-define(ROUNDS, 5).

-spec main([string()]) -> no_return().
main([Out]) ->
    Dir = filename:join(case os:getenv("TMPDIR") of false -> "/tmp"; T -> T end,
                        "hm_access_bench_" ++ os:getpid()),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    ok = application:set_env(mnesia, dir, Dir),
    ok = mnesia:create_schema([node()]),
    ok = hypermnesia:start(),
    {atomic, ok} = hypermnesia:create_table(ect, [{type, pawset}, {attributes, [k, v]},
                                                  {ram_copies, [node()]}]),
    {atomic, ok} = mnesia:create_table(plt, [{attributes, [k, v]}, {ram_copies, [node()]}]),
    [begin
         ok = hypermnesia:async_ec(fun() -> mnesia:write({ect, K, K}) end),
         ok = mnesia:async_dirty(fun() -> mnesia:write({plt, K, K}) end)
     end || K <- lists:seq(1, 1000)],
    Rows = [{"read, plain table, async_dirty", fun(K) -> mnesia:async_dirty(fun() -> mnesia:read(plt, K) end) end},
            {"read, plain table, async_ec", fun(K) -> hypermnesia:async_ec(fun() -> mnesia:read(plt, K) end) end},
            {"read, EC table, async_ec", fun(K) -> hypermnesia:async_ec(fun() -> mnesia:read(ect, K) end) end},
            {"write, plain table, async_dirty", fun(K) -> mnesia:async_dirty(fun() -> mnesia:write({plt, K, x}) end) end},
            {"write, plain table, async_ec", fun(K) -> hypermnesia:async_ec(fun() -> mnesia:write({plt, K, x}) end) end},
            {"write, EC table, async_ec", fun(K) -> hypermnesia:async_ec(fun() -> mnesia:write({ect, K, x}) end) end}],
    Measured = [{Name, median([per_call(F) || _ <- lists:seq(1, ?ROUNDS)])} || {Name, F} <- Rows],
    Base = fun(Kind) -> proplists:get_value(Kind ++ ", plain table, async_dirty", Measured) end,
    {{Y, Mo, D}, {H, Mi, _}} = calendar:universal_time(),
    Id = io_lib:format("access-~4..0w~2..0w~2..0w-~2..0w~2..0w", [Y, Mo, D, H, Mi]),
    Text = [io_lib:format("# The async_ec access path on one node (run ~s)~n~n"
                          "`make bench-access`: median of ~p rounds of ~p calls, ns per call; "
                          "host: ~p schedulers, load average ~s.~n~n"
                          "| call | ns | / async_dirty |~n|---|---|---|~n",
                          [Id, ?ROUNDS, ?N, erlang:system_info(schedulers_online),
                           string:trim(os:cmd("cut -d' ' -f1-3 /proc/loadavg"))]),
            [io_lib:format("| ~s | ~p | ~.2f |~n",
                           [Name, Ns, Ns / Base(hd(string:split(Name, ",")))])
             || {Name, Ns} <- Measured]],
    ok = file:write_file(Out, Text),
    io:format("~s~nwrote ~s~n", [Text, Out]),
    _ = mnesia:stop(),
    _ = file:del_dir_r(Dir),
    halt(0).

per_call(F) ->
    {Us, _} = timer:tc(fun() -> loop(F, ?N) end),
    Us * 1000 div ?N.

loop(_, 0) -> ok;
loop(F, N) -> _ = F(N rem 1000 + 1), loop(F, N - 1).

median(L) -> lists:nth((length(L) + 1) div 2, lists:sort(L)).
