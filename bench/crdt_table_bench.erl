%% @doc ChiaVe's benchmarks on CRDT tables, on real nodes (the ChiaVe paper, *ChiaVe: A
%% Flexible CRDT-Based Key-Value Store*, §6.1 "Latency vs. Throughput" and §6.2
%% "Convergence Time"), per flavor, on three peer nodes of this host ({@link hm_cluster}),
%% an `awset' table per flavor with a copy on every node and the broadcast epoch at 100 ms
%% (ChiaVe's setting for its convergence runs).
%%
%% <dl>
%% <dt>Latency against offered throughput</dt><dd>open-loop generators on every node offer a
%% total rate of adds (`hypermnesia:update(Tab, Key, {add, E})') and reads
%% (`hypermnesia:value/2') on 1,000 keys, write-only, 80/20 and read-only; a call's latency
%% counts from the moment it was due, so a generator that falls behind counts its queueing
%% (no coordinated omission). The p95 over every call, and the rate achieved.</dd>
%% <dt>Bytes on the wire per update</dt><dd>the bytes every node sent on its distribution
%% connections (`send_oct' of the connections' ports) during the write-only points, over
%% the updates made: everything a table sends per update (its operations or batches,
%% acknowledgements, retransmissions), and the generators' own traffic, which is none (they
%% run on the nodes).</dd>
%% <dt>Convergence</dt><dd>under a background load of writes and reads on other keys, node 1
%% adds N new elements to one key (ChiaVe: 10,000), one call after the other; every node polls that
%% key's size in its own copy, as `hypermnesia:value/2' shows it there (the updates the
%% copy applied, its row written or not): every 20 ms, every 100 ms once the copy holds
%% 2,000 elements (a poll copies the whole set), and every 2 ms from the moment node 1 made
%% its last add (no copy can hold all N before), so that a node's time is late by a few ms
%% at most, not by up to a coarse poll's 100 ms (ChiaVe reads the time from its replicas'
%% logs). A node's convergence time runs from the first add to when its copy holds all N;
%% the p95 over the nodes and repetitions.</dd>
%% </dl>
%%
%% `main([File])' writes `File' (Markdown) and the generated CRDT section of
%% bench/REPORT.md. Environment: `HM_CRDT_RATES' (offered total ops/s, default
%% "1000,4000,12000"), `HM_CRDT_SECONDS' (per point, default 2), `HM_CRDT_BG' (background
%% ops/s of the convergence runs, default "0,2000"), `HM_CRDT_REPS' (convergence
%% repetitions, default 1), `HM_CRDT_ADDS' (adds per convergence run, default
%% "1000,3000,10000"), `HM_CRDT_PREFIX' (of the peer nodes' names, default "crdtb"); a convergence run stops adding and waiting 45 s after its first
%% add (what is not there then is reported as not converged). A subset: `HM_CRDT_FLAVORS'
%% (default "op,state,delta") and `HM_CRDT_LATENCY' (`0': no latency points, only the
%% convergence runs); a subset run writes `File' only, never bench/REPORT.md, whose
%% generated section holds full runs.
-module(crdt_table_bench).

-export([main/1, gen/6, adds/4, watch/4, sent_bytes/0]).

-define(KEYS, 1000).
-define(WORKERS, 8).
%% a convergence run stops waiting this long after its first add
-define(CONVERGE_CAP_MS, 45000).
%% the name a convergence watcher has on its node while it polls
-define(WATCHER, crdt_table_bench_watcher).

-spec main([string()]) -> no_return().
main([File]) ->
    Rates = ints(env("HM_CRDT_RATES", "1000,4000,12000")),
    Secs = list_to_integer(env("HM_CRDT_SECONDS", "2")),
    Bgs = ints(env("HM_CRDT_BG", "0,2000")),
    Reps = list_to_integer(env("HM_CRDT_REPS", "1")),
    Sizes = ints(env("HM_CRDT_ADDS", "1000,3000,10000")),
    Dir = filename:join(env("TMPDIR", "/tmp"), "hm_crdt_bench_" ++ os:getpid()),
    C = hm_cluster:start(#{nodes => 3, dir => Dir, prefix => env("HM_CRDT_PREFIX", "crdtb"),
                           modules => [?MODULE]}),
    T0 = erlang:monotonic_time(millisecond),
    try
        Nodes = hm_cluster:nodes(C),
        Flavors = [list_to_existing_atom(F)
                   || F <- string:lexemes(env("HM_CRDT_FLAVORS", "op,state,delta"), ",")],
        [error({bad_flavor, F}) || F <- Flavors, not lists:member(F, [op, state, delta])],
        Latency = env("HM_CRDT_LATENCY", "1") =/= "0",
        Subset = Flavors =/= [op, state, delta] orelse not Latency,
        [{atomic, ok} = hm_cluster:call(C, 1, hypermnesia, create_table,
                                        [tab(F), [{crdt, awset}, {flavor, F}, {epoch, 100},
                                                  {ram_copies, Nodes}]]) || F <- Flavors],
        Lat = [{F, Mix, R, latency_point(C, tab(F), Mix, R, Secs)}
               || Latency, F <- Flavors, Mix <- [100, 80, 0], R <- Rates],
        Conv = [{F, Bg, Adds, converge(C, F, Bg, Reps, Adds)}
                || Adds <- Sizes, F <- Flavors, Bg <- Bgs],
        Wall = (erlang:monotonic_time(millisecond) - T0) div 1000,
        Md = report(File, Lat, Conv, #{rates => Rates, secs => Secs, reps => Reps,
                                       adds => Sizes, wall => Wall, subset => Subset}),
        ok = file:write_file(File, Md),
        ok = case Subset of
                 true -> ok;
                 false -> report_section(File, Md)
             end,
        io:format("~s", [Md])
    after
        hm_cluster:stop(C),
        _ = file:del_dir_r(Dir)
    end,
    halt(0).

env(K, D) -> case os:getenv(K) of false -> D; "" -> D; V -> V end.
ints(S) -> [list_to_integer(X) || X <- string:lexemes(S, ",")].

tab(F) -> list_to_atom("crdtb_" ++ atom_to_list(F)).

%%% ------------------------------------------------------------- latency and bytes

%% Offer `Rate' ops/s in all (a third per node) for `Secs' s, `WritePct' % adds.
latency_point(C, Tab, WritePct, Rate, Secs) ->
    Before = [hm_cluster:call(C, I, ?MODULE, sent_bytes, []) || I <- [1, 2, 3]],
    Self = self(),
    Ps = [spawn_link(fun() ->
                             R = hm_cluster:call(C, I, ?MODULE, gen,
                                                 [Tab, WritePct, Rate / 3, Secs * 1000, I,
                                                  random], (Secs + 120) * 1000),
                             Self ! {lat, self(), R}
                     end) || I <- [1, 2, 3]],
    Rs = [receive {lat, P, R} -> R end || P <- Ps],
    After = [hm_cluster:call(C, I, ?MODULE, sent_bytes, []) || I <- [1, 2, 3]],
    Lats = lists:sort(lists:append([L || {L, _, _} <- Rs])),
    Writes = lists:sum([W || {_, W, _} <- Rs]),
    %% the calls made over the time the slowest node took to make its share (a generator
    %% that falls behind makes every call it was offered, later)
    Elapsed = lists:max([E || {_, _, E} <- Rs]),
    #{p95_ms => pct(Lats, 0.95) / 1000, p50_ms => pct(Lats, 0.50) / 1000,
      achieved => round(length(Lats) * 1000000 / max(Elapsed, Secs * 1000000)),
      writes => Writes,
      bytes => lists:sum(After) - lists:sum(Before)}.

pct([], _) -> 0;
pct(L, P) -> hm_bench_stats:percentile(L, P).

%% @doc Bytes this node sent so far on its distribution connections.
-spec sent_bytes() -> non_neg_integer().
sent_bytes() ->
    lists:sum([case inet:getstat(Port, [send_oct]) of
                   {ok, [{send_oct, N}]} -> N;
                   _ -> 0
               end || {_, Port} <- erlang:system_info(dist_ctrl), is_port(Port)]).

%% @doc On a node: `?WORKERS' open-loop workers offering `Rate' ops/s together for `Ms' ms,
%% `WritePct' % adds of a random element to a random key of `Keys' (`random': 1,000 keys),
%% the rest reads. Returns every call's latency in µs, counted from when it was due, how
%% many adds were made, and how long it took (µs).
-spec gen(atom(), 0..100, number(), pos_integer(), integer(), random | [term()]) ->
          {[non_neg_integer()], non_neg_integer(), non_neg_integer()}.
gen(Tab, WritePct, Rate, Ms, Seed, random) ->
    Self = self(),
    Start = erlang:monotonic_time(microsecond) + 10000,
    Gap = ?WORKERS * 1000000 / Rate,
    Ws = [spawn_link(fun() ->
                             rand:seed(exsss, {Seed, W, 17}),
                             Self ! {done, self(), work(Tab, WritePct, Start + W * Gap / ?WORKERS,
                                                        Gap, Start + Ms * 1000, [], 0)}
                     end) || W <- lists:seq(1, ?WORKERS)],
    Rs = [receive {done, P, R} -> R end || P <- Ws],
    {lists:append([L || {L, _} <- Rs]), lists:sum([N || {_, N} <- Rs]),
     erlang:monotonic_time(microsecond) - Start}.

work(_Tab, _WritePct, Due, _Gap, End, Lats, Writes) when Due >= End -> {Lats, Writes};
work(Tab, WritePct, Due, Gap, End, Lats, Writes) ->
    Now = erlang:monotonic_time(microsecond),
    _ = case round(Due) - Now of
            Wait when Wait > 1000 -> receive after Wait div 1000 -> ok end;
            _ -> ok
        end,
    Key = rand:uniform(?KEYS),
    W = rand:uniform(100) =< WritePct,
    _ = case W of
            true -> ok = hypermnesia:update(Tab, Key, {add, rand:uniform(1000)});
            false -> hypermnesia:value(Tab, Key)
        end,
    Lat = erlang:monotonic_time(microsecond) - round(Due),
    work(Tab, WritePct, Due + Gap, Gap, End, [Lat | Lats],
         Writes + case W of true -> 1; false -> 0 end).

%%% ------------------------------------------------------------- convergence

%% Background load `Bg' ops/s (80 % adds on the 1,000 other keys), then `Adds' adds to key
%% `big' from node 1; the convergence time of every node, `Reps' times.
converge(C, F, Bg, Reps, Adds) ->
    Tab = tab(F),
    Times = lists:append(
              [begin
                   Key = {big, Bg, Rep},
                   Self = self(),
                   %% a generator process on each node, stopped with its workers (linked)
                   Loads = [{I, hm_cluster:call(C, I, erlang, spawn,
                                                [?MODULE, gen, [Tab, 80, Bg / 3, 600000,
                                                                Rep * 10 + I, random]])}
                            || Bg > 0, I <- [1, 2, 3]],
                   Until = os:system_time(millisecond) + ?CONVERGE_CAP_MS + 200,
                   Watchers = [spawn_link(fun() ->
                                                  Self ! {conv, self(),
                                                          hm_cluster:call(C, I, ?MODULE, watch,
                                                                          [Tab, Key, Adds, Until],
                                                                          ?CONVERGE_CAP_MS + 30000)}
                                          end) || I <- [1, 2, 3]],
                   timer:sleep(200),
                   {Start, _Made} = hm_cluster:call(C, 1, ?MODULE, adds,
                                                    [Tab, Key, Adds, Until],
                                                    ?CONVERGE_CAP_MS + 30000),
                   Ends = [receive {conv, P, E} -> E end || P <- Watchers],
                   [true = hm_cluster:call(C, I, erlang, exit, [P, kill]) || {I, P} <- Loads],
                   [case E of
                        timeout -> timeout;
                        _ -> (E - Start) / 1000
                    end || E <- Ends]
               end || Rep <- lists:seq(1, Reps)]),
    Done = lists:sort([T || T <- Times, T =/= timeout]),
    %% a run that did not converge counts as longer than any that did
    #{p95_ms => case Done =:= [] orelse pct(Done ++ [infinity || T <- Times, T =:= timeout],
                                            0.95) =:= infinity of
                    true -> none;
                    false -> pct(Done, 0.95)
                end,
      max_ms => case Done of [] -> none; _ -> lists:last(Done) end,
      samples => length(Times), timeouts => length(Times) - length(Done)}.

%% @doc On node 1: add `N' new elements to `Key', one call after the other, stopping at
%% the host's time `Until' (ms, `os:system_time/1'); returns when the first was
%% made (the host's clock, `os:system_time/1' in µs: the same for every node of the host) and
%% how many were.
-spec adds(atom(), term(), pos_integer(), integer()) -> {integer(), non_neg_integer()}.
adds(Tab, Key, N, Until) ->
    Start = os:system_time(microsecond),
    Made = add_loop(Tab, Key, 1, N, Until),
    %% the watchers poll finely from now on (see watch/4)
    _ = [try erlang:send({?WATCHER, Nd}, adds_done) catch error:badarg -> no_watcher end
         || Nd <- [node() | nodes()]],
    {Start, Made}.

add_loop(_Tab, _Key, I, N, _Until) when I > N -> N;
add_loop(Tab, Key, I, N, Until) ->
    %% every add: on an overloaded host a hundred of them took longer than the
    %% controller waits for this call (it crashed the run instead of reporting it)
    case os:system_time(millisecond) > Until of
        true -> I - 1;
        false ->
            ok = hypermnesia:update(Tab, Key, {add, I}),
            add_loop(Tab, Key, I + 1, N, Until)
    end.

%% @doc On a node: poll this node's copy of `Key' until it holds `N' elements (every 20 ms,
%% every 100 ms once it holds 2,000 elements: a poll copies the whole set; every 2 ms once
%% node 1 says its adds are made, see adds/4); returns when (the host's clock in µs), or
%% `timeout' once that clock passes `Cap' (ms).
-spec watch(atom(), term(), pos_integer(), integer()) -> integer() | timeout.
watch(Tab, Key, N, Cap) ->
    true = register(?WATCHER, self()),
    try watch(Tab, Key, N, Cap, coarse)
    after unregister(?WATCHER)
    end.

watch(Tab, Key, N, Cap, Mode) ->
    Size = case hypermnesia:value(Tab, Key) of
               L when is_list(L) -> length(L);
               _ -> 0
           end,
    Now = os:system_time(microsecond),
    Wait = if Mode =:= fine -> 2;
              Size >= 2000 -> 100;
              true -> 20
           end,
    if Size >= N -> Now;
       Now div 1000 > Cap -> timeout;
       true ->
           receive adds_done -> watch(Tab, Key, N, Cap, fine)
           after Wait -> watch(Tab, Key, N, Cap, Mode)
           end
    end.

%%% ------------------------------------------------------------- report

%% ChiaVe's published p95 convergence of 10,000 adds (s), at 10k and 50k background ops/s,
%% on a 16-vCPU host.
chiave(delta) -> {1.06, 2.15};
chiave(op) -> {0.61, 1.60};
chiave(state) -> {1.51, 4.35}.

report(File, Lat, Conv, #{rates := Rates, secs := Secs, reps := Reps, adds := Sizes,
                          wall := Wall, subset := Subset}) ->
    Id = filename:basename(File, ".md"),
    Cores = erlang:system_info(logical_processors_available),
    Head = io_lib:format(
             "# CRDT tables: ChiaVe's benchmarks (run `~s`)~n~n"
             "Generated by `make bench-crdt-tables` (bench/crdt_table_bench.erl) in ~p s, ~s, "
             "3 peer nodes on one host with ~p cores, shared with other work while it ran "
             "(ChiaVe: a 16-vCPU host). One `awset` table per flavor, a copy on every node, "
             "broadcast epoch 100 ms. Offered rates ~w ops/s in all, ~p s per point; "
             "convergence: ~w adds to one key, ~p repetitions per background load, every "
             "node's copy timed.~n~n",
             [Id, Wall, "OTP " ++ erlang:system_info(otp_release), Cores, Rates, Secs, Sizes,
              Reps]),
    Note = case Subset of
               true -> io_lib:format("A subset run: flavors ~w~s (`HM_CRDT_FLAVORS`, "
                                     "`HM_CRDT_LATENCY`).~n~n",
                                     [lists:usort([F || {F, _, _, _} <- Conv]),
                                      case Lat of [] -> ", no latency points"; _ -> "" end]);
               false -> ""
           end,
    LatHead = "## p95 latency against offered throughput\n\n"
        "| flavor | workload | offered ops/s | achieved ops/s | p50 ms | p95 ms |\n"
        "|---|---|---|---|---|---|\n",
    LatRows = [io_lib:format("| ~p | ~s | ~p | ~p | ~.2f | ~.2f |~n",
                             [F, mix(Mix), R, A, P50, P95])
               || {F, Mix, R, #{achieved := A, p50_ms := P50, p95_ms := P95}} <- Lat],
    BytesHead = "\n## Bytes on the wire per update (write-only points)\n\n"
        "Bytes the three nodes sent on their distribution connections, over the updates "
        "made: operations or batches, acknowledgements, retransmissions.\n\n"
        "| flavor | offered ops/s | updates | bytes per update |\n|---|---|---|---|\n",
    BytesRows = [io_lib:format("| ~p | ~p | ~p | ~.1f |~n", [F, R, W, B / max(1, W)])
                 || {F, 100, R, #{writes := W, bytes := B}} <- Lat],
    ConvHead = "\n## Time to converge of N adds to one set key under background load\n\n"
        "From the first add until a node's copy holds every element (polled every 2 ms from "
        "the last add on); p95 over the nodes and repetitions. ChiaVe's figures are for 10,000 adds. Target: half ChiaVe's p95 at its "
        "lowest published load (10k ops/s), at the highest background load this host "
        "sustains.\n\n"
        "| flavor | adds | background ops/s offered | p95 s | max s | samples "
        "| not converged in 45 s | ChiaVe p95 s at 10k / 50k ops/s | target s | met |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n",
    MaxBg = lists:max([Bg || {_, Bg, _, _} <- Conv]),
    ConvRows = [begin
                    {C10, C50} = chiave(F),
                    {Met, P} = case P95 of
                                   none -> {"no", "-"};
                                   _ -> {case Bg =:= MaxBg andalso Adds =:= 10000 of
                                             true when P95 / 1000 =< C10 / 2 -> "yes";
                                             true -> "no";
                                             false -> "-"
                                         end, io_lib:format("~.2f", [P95 / 1000])}
                               end,
                    io_lib:format("| ~p | ~p | ~p | ~s | ~s | ~p | ~p | ~.2f / ~.2f | ~.2f | ~s |~n",
                                  [F, Adds, Bg, P, secs(Max), N, To, C10, C50, C10 / 2, Met])
                end || {F, Bg, Adds, #{p95_ms := P95, max_ms := Max, samples := N,
                                 timeouts := To}} <- Conv],
    iolist_to_binary([Head, Note, LatHead, LatRows, BytesHead, BytesRows, ConvHead, ConvRows]).

%% a data row of a Markdown table (not its header or separator), and one of 10,000 adds
is_row(<<"| flavor", _/binary>>) -> false;
is_row(<<"|---", _/binary>>) -> false;
is_row(<<"| ", _/binary>>) -> true;
is_row(_) -> false.

is_10k_row(L) ->
    case binary:split(L, <<" | ">>, [global]) of
        [_, <<"10000">> | _] -> true;
        _ -> false
    end.

mix(100) -> "write-only";
mix(0) -> "read-only";
mix(W) -> io_lib:format("~p/~p", [W, 100 - W]).

secs(none) -> "-";
secs(Ms) -> io_lib:format("~.2f", [Ms / 1000]).

%% The generated CRDT section of bench/REPORT.md, between its markers (added at the end
%% the first time): the run, a link to `Results' (every table), and the convergence rows of
%% 10,000 adds, those ChiaVe's figures are for.
report_section(Results, Md0) ->
    File = "bench/REPORT.md",
    {ok, Old} = file:read_file(File),
    Id = filename:basename(Results, ".md"),
    Conv = case binary:split(Md0, <<"## Time to converge">>) of
               [_, Tail] -> [<<"## Time to converge">> |
                             [[L, <<"\n">>] || L <- binary:split(Tail, <<"\n">>, [global]),
                                             not is_row(L) orelse is_10k_row(L)]];
               [_] -> Md0
           end,
    Md = iolist_to_binary([io_lib:format("# CRDT tables: ChiaVe's benchmarks (run `~s`)~n~n"
                                         "Every table of the run (p95 latency against offered "
                                         "throughput, bytes on the wire per update, convergence "
                                         "of every size): [~s.md](results/~s.md).~n~n",
                                         [Id, Id, Id]), Conv]),
    Begin = <<"<!-- BEGIN GENERATED crdt-tables: crdt_table_bench writes this part; edit outside "
              "the markers -->">>,
    End = <<"<!-- END GENERATED crdt-tables -->">>,
    Body = re:replace(Md, <<"^#">>, <<"###">>, [global, multiline, {return, binary}]),
    New = case binary:split(Old, Begin) of
              [Pre, Rest] ->
                  [_, Post] = binary:split(Rest, End),
                  [Pre, Begin, <<"\n">>, Body, <<"\n">>, End, Post];
              [_] ->
                  [Old, <<"\n## CRDT tables: ChiaVe's benchmarks (generated)\n\n">>, Begin,
                   <<"\n">>, Body, <<"\n">>, End, <<"\n">>]
          end,
    file:write_file(File, New).
