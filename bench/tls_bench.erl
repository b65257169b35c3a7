%% @doc `make bench-tls': what TLS distribution costs per EC write, against plain TCP
%% distribution, in the same run on the same host. Two clusters of three peer nodes
%% (test/hm_cluster.erl) run side by side: one on plain TCP (`tcpN_<os pid>'), one on TLS
%% (`tlsN_<os pid>', `-proto_dist inet_tls', certificates made by test/hm_tls.erl as the
%% guide's quick start shows, verification on both sides). Each holds a `pawset' table with
%% a `ram_copies' copy on every node. The rounds alternate between the two clusters, so that
%% other load on the host falls on both alike. Each round:
%% <ul>
%% <li>throughput: two writers on node 1 write records of 100 bytes to random keys among
%% 10,000 under `async_ec' for a fixed time; then the run waits until no copy holds an
%% unstable operation (every copy applied and acknowledged every write). The CPU time of the
%% three nodes' OS processes over all of it, divided by the writes, is the CPU per write:
%% what the cluster spent to apply, send, receive and acknowledge one write;</li>
%% <li>latency: one client on node 1 makes `sync_ec' writes one after the other (each returns
%% once the two other copies applied it): the median and the 99th percentile.</li>
%% </ul>
%% Prints a Markdown report and writes it to the file given. About a minute, build included.
-module(tls_bench).

-export([main/1]).
-export([writers/2, sync_writes/1, tls_peers/0]).

-define(ROUNDS, 3).
-define(WRITE_MS, 5000).
-define(WRITERS, 2).
-define(KEYS, 10000).
-define(SYNC_WRITES, 1500).

%% @doc `main([OutFile])'.
-spec main([string()]) -> no_return().
main([Out]) ->
    case hm_tls:available() of
        false -> io:format("bench-tls: openssl is not installed (it makes the certificates)~n"),
                 halt(1);
        true -> ok
    end,
    T0 = erlang:monotonic_time(millisecond),
    Dir = filename:absname(filename:join(["_build", "bench", "tls-" ++ os:getpid()])),
    {ok, Host} = inet:gethostname(),
    ok = hm_tls:ca(Dir, "ca"),
    ok = hm_tls:certificate(Dir, "node", "ca", Host),
    OptFile = hm_tls:optfile(Dir, "node", "ca"),
    Tcp = start("tcp", []),
    Tls = start("tls", hm_tls:dist_args(OptFile)),
    Rounds = try
                 true = lists:all(fun(I) -> [] =/= hm_cluster:call(Tls, I, ?MODULE, tls_peers,
                                                                     [])
                                  end, hm_cluster:ids(Tls)),
                 lists:append([[{tcp, run_round(Tcp)}, {tls, run_round(Tls)}]
                               || _ <- lists:seq(1, ?ROUNDS)])
             after
                 hm_cluster:stop(Tcp),
                 hm_cluster:stop(Tls)
             end,
    Report = report(Rounds, Host, erlang:monotonic_time(millisecond) - T0),
    io:format("~ts", [Report]),
    ok = filelib:ensure_dir(Out),
    ok = file:write_file(Out, unicode:characters_to_binary(Report)),
    io:format("~nwritten to ~s~n", [Out]),
    halt(0).

start(Prefix, Args) ->
    C = hm_cluster:start(#{nodes => 3, prefix => Prefix, modules => [?MODULE],
                           args => Args}),
    Nodes = hm_cluster:nodes(C),
    {atomic, ok} = hm_cluster:call(C, 1, hypermnesia, create_table,
                                   [t, [{ec, pawset}, {attributes, [k, v]},
                                        {ram_copies, Nodes}]]),
    [ok = hm_cluster:call(C, I, mnesia, wait_for_tables, [[t], 30000]) || I <- [1, 2, 3]],
    C.

%% One round on cluster C: #{writes, ms, cpu_ms, sync_us (sorted)}.
run_round(C) ->
    Pids = [hm_cluster:call(C, I, os, getpid, []) || I <- hm_cluster:ids(C)],
    Cpu0 = cpu_ms(Pids),
    W0 = erlang:monotonic_time(millisecond),
    Writes = hm_cluster:call(C, 1, ?MODULE, writers, [?WRITERS, ?WRITE_MS], ?WRITE_MS + 30000),
    ok = hm_cluster:wait_until(
           fun() -> lists:all(fun(I) -> 0 =:= maps:get(unstable_ops,
                                                       hm_cluster:call(C, I, hypermnesia,
                                                                       info, [t]))
                              end, hm_cluster:ids(C))
           end, 60000),
    Ms = erlang:monotonic_time(millisecond) - W0,
    CpuMs = cpu_ms(Pids) - Cpu0,
    Sync = hm_cluster:call(C, 1, ?MODULE, sync_writes, [?SYNC_WRITES], 60000),
    #{writes => Writes, ms => Ms, cpu_ms => CpuMs, sync_us => lists:sort(Sync)}.

%% The CPU time (user and system) of these OS processes so far, in ms.
cpu_ms(Pids) ->
    Tick = 1000 / list_to_integer(string:trim(os:cmd("getconf CLK_TCK"))),
    lists:sum([begin
                   {ok, Stat} = file:read_file("/proc/" ++ P ++ "/stat"),
                   %% the fields after the command name (in parentheses, may hold spaces)
                   [_, After] = string:split(Stat, ") ", trailing),
                   Fields = string:lexemes(After, " "),
                   Utime = binary_to_integer(lists:nth(12, Fields)),
                   Stime = binary_to_integer(lists:nth(13, Fields)),
                   (Utime + Stime) * Tick
               end || P <- Pids]).

report(Rounds, Host, WallMs) ->
    Per = fun(Kind) -> [R || {K, R} <- Rounds, K =:= Kind] end,
    Row = fun(Kind) ->
                  Rs = Per(Kind),
                  Writes = lists:sum([W || #{writes := W} <- Rs]),
                  Cpu = lists:sum([Cm || #{cpu_ms := Cm} <- Rs]),
                  Rate = lists:sum([W / (?WRITE_MS / 1000) || #{writes := W} <- Rs]) / length(Rs),
                  Sync = lists:sort(lists:append([S || #{sync_us := S} <- Rs])),
                  #{cpu_us => 1000 * Cpu / Writes, rate => Rate,
                    p50 => percentile(Sync, 50), p99 => percentile(Sync, 99)}
          end,
    Tcp = Row(tcp),
    Tls = Row(tls),
    Ratio = fun(K) -> maps:get(K, Tls) / maps:get(K, Tcp) end,
    Line = fun(Name, #{cpu_us := C, rate := R, p50 := P50, p99 := P99}) ->
                   io_lib:format("| ~s | ~.1f | ~b | ~b | ~b |~n",
                                 [Name, C, round(R), round(P50), round(P99)])
           end,
    Each = [io_lib:format("| ~b | ~s | ~b | ~b | ~b | ~.1f |~n",
                          [N, K, W, Ms, round(Cm), 1000 * Cm / W])
            || {N, {K, #{writes := W, ms := Ms, cpu_ms := Cm}}}
                   <- lists:zip(lists:seq(1, length(Rounds)), Rounds)],
    [io_lib:format("# TLS distribution against plain TCP (`make bench-tls`)~n~n"
                   "- Host `~s`, ~b cores, Erlang/OTP ~s; load average at the end `~s`.~n"
                   "- Two clusters of 3 nodes on this host, one on plain TCP distribution, "
                   "one on TLS (`-proto_dist inet_tls`, certificates verified on both sides); "
                   "a `pawset` `ram_copies` table on every node. ~b rounds per cluster, "
                   "alternating.~n"
                   "- Per round: ~b writers on node 1, `async_ec` writes of 100-byte records "
                   "to random keys among ~b, for ~b ms; CPU counted until no copy holds an "
                   "unstable operation. Then ~b `sync_ec` writes one after the other.~n"
                   "- Wall time ~.1f s.~n~n",
                   [Host, erlang:system_info(logical_processors_available),
                    erlang:system_info(otp_release),
                    string:trim(os:cmd("cut -d' ' -f1-3 /proc/loadavg")),
                    ?ROUNDS, ?WRITERS, ?KEYS, ?WRITE_MS, ?SYNC_WRITES, WallMs / 1000]),
     "| distribution | CPU per async_ec write, 3 nodes (µs) | async_ec writes/s | "
     "sync_ec median (µs) | sync_ec p99 (µs) |\n|---|---|---|---|---|\n",
     Line("plain TCP", Tcp), Line("TLS", Tls),
     io_lib:format("~nTLS against plain TCP: CPU per write ~.2fx, write rate ~.2fx, "
                   "sync_ec median ~.2fx, p99 ~.2fx.~n~n",
                   [Ratio(cpu_us), Ratio(rate), Ratio(p50), Ratio(p99)]),
     "Each round:\n\n| round | distribution | writes | ms until stable | CPU (ms) | "
     "CPU per write (µs) |\n|---|---|---|---|---|---|\n",
     Each].

percentile(Sorted, P) ->
    lists:nth(max(1, min(length(Sorted), round(P / 100 * length(Sorted)))), Sorted).

%%% ------------------------------------------------------------- on the nodes

%% `N' writers for `Ms' ms; returns how many writes returned.
writers(N, Ms) ->
    Self = self(),
    Until = erlang:monotonic_time(millisecond) + Ms,
    Pad = binary:copy(<<"x">>, 96),
    Pids = [spawn_link(fun() -> Self ! {self(), write_loop(Until, Pad, 0)} end)
            || _ <- lists:seq(1, N)],
    lists:sum([receive {P, W} -> W end || P <- Pids]).

write_loop(Until, Pad, W) ->
    case erlang:monotonic_time(millisecond) >= Until of
        true -> W;
        false ->
            K = rand:uniform(?KEYS),
            ok = hypermnesia:async_ec(fun() -> mnesia:write({t, K, <<W:32, Pad/binary>>}) end),
            write_loop(Until, Pad, W + 1)
    end.

%% `N' sync_ec writes one after the other; the time of each in µs.
sync_writes(N) ->
    Pad = binary:copy(<<"y">>, 96),
    [begin
         T = erlang:monotonic_time(microsecond),
         ok = hypermnesia:sync_ec(fun() -> mnesia:write({t, rand:uniform(?KEYS),
                                                         <<I:32, Pad/binary>>}) end),
         erlang:monotonic_time(microsecond) - T
     end || I <- lists:seq(1, N)].

%% The nodes this one is connected to over TLS distribution.
tls_peers() ->
    [N || N <- nodes(), {ok, {net_address, _, _, tls, _}} <- [net_kernel:node_info(N, address)]].
