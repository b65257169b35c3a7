%% @doc What the modules of `make bench' share: the peer cluster (started by
%% test/hm_cluster.erl) and calls to its nodes, waits, clocks, the machine a run ran on,
%% context names, and the formats of the Markdown and of the JSON record.
-module(hm_bench_lib).

%% the cluster
-export([with_cluster/2, ids/1, call/5, pcall/4, wait_whole/1, wait_until/2]).
%% time
-export([now_ms/0, now_ms_sys/0, sleep_until/1, clock/0, date_string/0]).
%% the machine
-export([machine/0, loadavg/0]).
%% figures, names and formats
-export([contexts/0, ctx_name/1, cfg_json/1, val_json/1, key/1, merge_add/2, sub/3, worst/1,
         fmt/2, utf8/1]).

-include("hm_bench.hrl").

-type cluster() :: #{cluster := hm_cluster:cluster(), nodes := [node()], storage := atom()}.
-export_type([cluster/0]).

%%% ============================================================= cluster

%% @doc Run `F' on a cluster of the profile's `nodes' nodes, stopped afterwards.
-spec with_cluster(#{nodes := pos_integer(), storage := atom(), _ => _},
                   fun((cluster()) -> R)) -> R.
with_cluster(P, F) ->
    C = cluster(maps:get(nodes, P), maps:get(storage, P)),
    try F(C) after stop_cluster(C) end.

%% N nodes started by hm_cluster (a fresh temporary directory, deleted by stop_cluster/1),
%% with the bench modules and test/hm_check.erl on their code path and the netsplit log
%% filter; the bench keeps the node names and the storage type beside the cluster.
cluster(N, Storage) ->
    HC = hm_cluster:start(#{nodes => N, prefix => "bench", modules => [?MODULE, hm_check],
                            network => network(),
                            log_filter => {hm_bench_netsplit,
                                           {fun hm_cluster:netsplit_filter/2,
                                            ["unknown_table"]}}}),
    #{cluster => HC, nodes => hm_cluster:nodes(HC), storage => Storage}.

stop_cluster(#{cluster := HC}) -> hm_cluster:stop(HC).

%% HM_BENCH_NETWORK=netns: every node in a network namespace of its own, and the partition
%% timeline's cut silent (hm_cluster, option `network'): packets dropped, the connections
%% up, shorter than the tick time, so no node notices it.
network() ->
    case os:getenv("HM_BENCH_NETWORK", "loopback") of
        "netns" -> netns;
        _ -> loopback
    end.

%% @doc The indexes of the cluster's nodes.
-spec ids(cluster()) -> [pos_integer()].
ids(#{cluster := HC}) -> hm_cluster:ids(HC).

%% @doc `M:F(A...)' on node `I'.
-spec call(cluster(), pos_integer(), module(), atom(), [term()]) -> term().
call(#{cluster := HC}, I, M, F, A) -> hm_cluster:call(HC, I, M, F, A, ?CALL_MS).

%% @doc The same call on every node, in parallel: each node's result, or what it raised.
-spec pcall(cluster(), module(), atom(), [term()]) -> [term()].
pcall(C, M, F, A) ->
    Self = self(),
    Refs = [begin
                R = make_ref(),
                spawn_link(fun() ->
                                   Self ! {R, hm_check:outcome(fun() -> call(C, I, M, F, A) end)}
                           end),
                R
            end || I <- ids(C)],
    [receive {R, X} -> X end || R <- Refs].

%% @doc After the timeline's heal: `ok' once Mnesia runs as one cluster again, `timeout'
%% after 30 s (the timeline's `rejoined').
-spec wait_whole(cluster()) -> ok | timeout.
wait_whole(C) ->
    Whole = lists:sort(maps:get(nodes, C)),
    wait_until(fun() ->
                       lists:all(fun(I) -> lists:sort(call(C, I, mnesia, system_info,
                                                           [running_db_nodes])) =:= Whole
                                 end, ids(C))
               end, 30000).

%% @doc `ok' once `F' returns `true', or `timeout' after `Ms' as a result the report shows
%% (hm_cluster:wait_until/2 raises instead); it polls every 20 ms, the resolution of the
%% convergence times.
-spec wait_until(fun(() -> term()), non_neg_integer()) -> ok | timeout.
wait_until(F, Ms) -> wait_until(F, now_ms() + Ms, 20).

wait_until(F, Deadline, Poll) ->
    case F() of
        true -> ok;
        _ -> case now_ms() > Deadline of
                 true -> timeout;
                 false -> timer:sleep(Poll), wait_until(F, Deadline, Poll)
             end
    end.

%%% ============================================================= time

%% @doc Monotonic milliseconds, for durations.
-spec now_ms() -> integer().
now_ms() -> erlang:monotonic_time(millisecond).

%% @doc System time in milliseconds, the same on every node of the host.
-spec now_ms_sys() -> integer().
now_ms_sys() -> erlang:system_time(millisecond).

%% @doc Sleep until system time `T' (ms), at once if it has passed.
-spec sleep_until(integer()) -> ok.
sleep_until(T) ->
    case T - erlang:system_time(millisecond) of
        D when D > 0 -> timer:sleep(D);
        _ -> ok
    end.

%% @doc Now, as RFC 3339 text.
-spec clock() -> string().
clock() -> calendar:system_time_to_rfc3339(erlang:system_time(second)).

%% @doc Now (UTC) as `yyyymmdd-hhmm', the date part of a run's file names.
-spec date_string() -> string().
date_string() ->
    {{Y, Mo, D}, {H, Mi, _}} = calendar:universal_time(),
    lists:flatten(io_lib:format("~4..0w~2..0w~2..0w-~2..0w~2..0w", [Y, Mo, D, H, Mi])).

%%% ============================================================= the machine

%% @doc The machine a run runs on: cores, schedulers, releases, load average, kernel.
-spec machine() -> map().
machine() ->
    #{cores => erlang:system_info(logical_processors_available),
      schedulers => erlang:system_info(schedulers_online),
      otp => list_to_binary(erlang:system_info(otp_release)),
      erts => list_to_binary(erlang:system_info(version)),
      mnesia => list_to_binary(case application:load(mnesia) of
                                   _ -> {ok, V} = application:get_key(mnesia, vsn), V
                               end),
      otp_version => otp_version(),
      loadavg_end => loadavg(),
      uname => list_to_binary(string:trim(os:cmd("uname -srm")))}.

%% @doc The load average over 1, 5 and 15 minutes, as `/proc/loadavg' gives it.
-spec loadavg() -> binary().
loadavg() -> list_to_binary(string:trim(os:cmd("cut -d' ' -f1-3 /proc/loadavg"))).

otp_version() ->
    File = filename:join([code:root_dir(), "releases", erlang:system_info(otp_release),
                          "OTP_VERSION"]),
    case file:read_file(File) of
        {ok, V} -> string:trim(V);
        _ -> list_to_binary(erlang:system_info(otp_release))
    end.

%%% ============================================================= figures, names, formats

%% @doc The five access contexts of the bench workload.
-spec contexts() -> [hm_bench_workload:context()].
contexts() -> [transaction, sync_dirty, async_dirty, {async_ec, pawset}, {async_ec, prwset}].

%% @doc A context's name in the record: `<<"async_ec_pawset">>', `<<"transaction">>'.
-spec ctx_name(hm_bench_workload:context()) -> binary().
ctx_name({async_ec, T}) -> list_to_binary("async_ec_" ++ atom_to_list(T));
ctx_name(A) -> atom_to_binary(A).

%% @doc A profile as the record keeps it: its settings, atoms as binaries.
-spec cfg_json(map()) -> map().
cfg_json(P) -> maps:map(fun(_, V) -> val_json(V) end, maps:without([contexts, extra, sweeps], P)).

%% @doc A setting's value as the record keeps it.
-spec val_json(term()) -> term().
val_json(V) when is_atom(V) -> atom_to_binary(V);
val_json(V) when is_map(V) -> V;
val_json(V) -> V.

%% @doc A map key as text: atoms, integers and binaries as they read, anything else as
%% `~0p' prints it.
-spec key(term()) -> binary().
key(K) when is_atom(K) -> atom_to_binary(K);
key(K) when is_integer(K) -> integer_to_binary(K);
key(K) when is_binary(K) -> K;
key(K) -> list_to_binary(io_lib:format("~0p", [K])).

%% @doc The counters of `M1' added to those of `M2'.
-spec merge_add(#{K => number()}, #{K => number()}) -> #{K => number()}.
merge_add(M1, M2) ->
    maps:fold(fun(K, V, A) -> maps:update_with(K, fun(X) -> X + V end, V, A) end, M2, M1).

%% @doc Seconds `Start'.. (1-based) of a per-second series, `Len' of them, nothing when out
%% of range.
-spec sub([T], integer(), integer()) -> [T].
sub(L, Start, Len) when Start =< length(L), Len > 0 -> lists:sublist(L, Start, Len);
sub(_, _, _) -> [].

%% @doc The largest value, null if any is null (not measured, or not reached within the
%% wait).
-spec worst([T]) -> T | null.
worst([]) -> null;
worst(L) -> case lists:member(null, L) of true -> null; false -> lists:max(L) end.

%% @doc A figure for the Markdown, in a unit: `pct', `mb', `ms', `x' (a ratio), `f' (a whole
%% number), `g' (as it is), `s' (seconds); `n/a' for null.
-spec fmt(term(), pct | mb | ms | x | f | g | s) -> iodata().
fmt(null, _) -> "n/a";
fmt(V, pct) -> io_lib:format("~.1f %", [100 * V]);
fmt(V, mb) -> io_lib:format("~.1f MB", [V / 1048576]);
fmt(V, ms) -> io_lib:format("~w ms", [V]);
fmt(V, x) -> io_lib:format("~.2fx", [V]);
fmt(V, f) -> integer_to_list(round(V));
fmt(V, g) -> io_lib:format("~p", [V]);
fmt(V, s) -> io_lib:format("~.1f s", [float(V)]).

%% @doc Markdown text (lists of characters, some above 255, and UTF-8 binaries) as UTF-8.
-spec utf8(unicode:chardata()) -> binary().
utf8(Md) -> unicode:characters_to_binary(Md).
