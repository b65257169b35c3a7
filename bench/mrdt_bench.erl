%% @doc Benchmark of sessions over mergeable types, the shapes of the evaluation of "Banyan:
%% Coordination-free Distributed Transactions over Mergeable Types" (section 5.2, Fig. 8;
%% section 5.3, Fig. 9 and Fig. 11), on three peer nodes of test/hm_cluster.erl
%% (`sesskb1_...'), a repository and a plain `pawset' table with copies on all three.
%%
%% <ul>
%% <li><b>Overhead against plain EC tables</b> (Fig. 8): C clients (1 to 128) on node 1 share
%% 32,000 operations (as in the paper, in both profiles), 80 % reads and 20 % writes of
%% 128-byte values over 1000 keys of 8 bytes.
%% Client I draws its operations from a generator seeded with I, so the EC run and every
%% session run perform the same reads and writes of the same keys, in the same order per
%% client. EC: each operation is one `async_ec' read or write. Sessions: one session per
%% client (connected at its start, closed at its end, both timed); a read is
%% `hm_session:read/2', a write `hm_session:write/4'; a publish follows every write
%% (`every write': each write visible on its own, as an EC write is), or every 10 or 100
%% operations of the client; `close' publishes what is left, so every run publishes every
%% write. Every session refreshes every 100 of its operations. Each session run uses a new
%% repository. Three rounds run EC and the three session runs in turn; the tables give
%% medians, ratios taken within a round, and the CPU time the three nodes used per
%% operation beside throughput.</li>
%% <li><b>Counter under conflicts</b> (Fig. 9): C clients spread over the three nodes, each
%% doing OPS/C increments or decrements (by 1) of a counter drawn from K keys
%% (read, then write the new value), publishing then refreshing every 100 operations.
%% Reported: operations per second; checked: once the public branches converged, the sum of
%% the counters equals the sum of every client's changes.</li>
%% <li><b>Log append</b> (Fig. 11): the time of 100 appends (each published) to a log already
%% holding N entries (written and replicated first), blob log against linked log; the
%% fastest of three rounds.</li>
%% <li><b>Storage after 32k operations</b> (section 5.2): the overhead workload with 32
%% clients and a publish after every write, once with history collection (every second, as
%% by default) and once with it switched off (application environment `mrdt_collect'); the
%% repository's records and memory on node 1 once the public branches converged (with
%% collection: and the copy's size held for three seconds of the nodes' own ticks, which
%% compact and collect), against the plain EC table after the same operations.</li>
%% </ul>
%%
%% `mrdt_bench:main(["quick" | "full", ResultsFile])' writes `ResultsFile' (its base name,
%% `sessions-<yyyymmdd-hhmm>', is the run's id) and the generated part of the sessions section of
%% bench/REPORT.md; the Makefile target `bench-sessions' runs it.
-module(mrdt_bench).
-behaviour(hm_mrdt).

-export([main/1, merge/3, worker/6, counter_worker/5]).

-define(KEYS, 1000).
-define(REFRESH, 100).
-define(REPEATS, 3).

%% The benchmark's value type: a 128-byte string, last writer (by term order) wins, as the
%% plain table's default conflict policy.
-spec merge(term(), binary(), binary()) -> {ok, binary()}.
merge(_, A, B) -> {ok, max(A, B)}.

-spec main([string()]) -> ok.
main([Profile, File]) ->
    Id = filename:basename(File, ".md"),
    {Clients, Ops, CClients, COps, KeySpaces} =
        case Profile of
            %% the overhead always runs the paper's 32k operations: with 6400, 128 clients made
            %% 50 operations each, an EC run lasted about 20 ms, and the sessions' ramp (128
            %% connects) and tail (the last publishes, in small groups) weighed in the ratio
            "quick" -> {[1, 8, 32, 128], 32000, [1, 8, 32, 128], 6400, [1024]};
            "full" -> {[1, 2, 4, 8, 16, 32, 64, 128], 32000, [1, 8, 32, 64, 128], 32000,
                       [1024, 4096]}
        end,
    Load0 = load(),
    C = hm_cluster:start(#{nodes => 3, prefix => "sesskb", modules => [?MODULE]}),
    try
        Nodes = hm_cluster:nodes(C),
        Overhead = [overhead(C, Nodes, N, Ops) || N <- Clients],
        Counter = [counter(C, N, COps, K) || K <- KeySpaces, N <- CClients],
        %% a blob log of 16000 entries takes minutes to build (each append copies it)
        Logs = [log_append(C, Type, Len) || Type <- [hm_mrdt_blob_log, hm_mrdt_linked_log],
                                            Len <- [0, 1000, 4000, 16000],
                                            Type =:= hm_mrdt_linked_log orelse Len =< 4000],
        Storage = storage(C, Nodes, 32, 32000),
        Run = #{id => Id, profile => Profile, ops => Ops, counter_ops => COps,
                load => {Load0, load()}, overhead => Overhead, counter => Counter,
                logs => Logs, storage => Storage},
        write_results(File, Run),
        write_report("bench/REPORT.md", Run)
    after
        hm_cluster:stop(C)
    end.

load() ->
    {ok, B} = file:read_file("/proc/loadavg"),
    hd(string:lexemes(binary_to_list(B), " ")).

%%% ------------------------------------------------------------------ overhead

%% ?REPEATS rounds, each running EC and the three session runs one after the other, so a
%% round's runs share the host's conditions: the median over the rounds of each
%% throughput, CPU time and ratio.
overhead(C, Nodes, N, Ops) ->
    Rounds = [overhead_round(C, Nodes, N, Ops) || _ <- lists:seq(1, ?REPEATS)],
    Col = fun(F) -> hm_bench_stats:lower_median([F(R) || R <- Rounds]) end,
    Row = #{clients => N,
            ec => {Col(fun(#{ec := {E, _}}) -> E end), Col(fun(#{ec := {_, E}}) -> E end)},
            sessions => [{Every,
                          #{ops => Col(fun(#{Every := {S, _}}) -> S end),
                            cpu => Col(fun(#{Every := {_, S}}) -> S end),
                            ratio => Col(fun(#{ec := {E, _}, Every := {S, _}}) -> E / S end),
                            cpu_ratio => Col(fun(#{ec := {_, E}, Every := {_, S}}) -> S / E end)}}
                         || Every <- [1, 10, 100]]},
    io:format("~p~n", [Row]),
    Row.

overhead_round(C, Nodes, N, Ops) ->
    Plain = new_plain(C, Nodes, N),
    Ec = run(C, ec, Plain, N, Ops),
    {atomic, ok} = hm_cluster:call(C, 1, hypermnesia, delete_table, [Plain]),
    maps:from_list(
      [{ec, Ec} |
       [{Every, begin
                    Repo = new_repo(C, Nodes, {N, Every}),
                    R = run(C, {session, Every}, Repo, N, Ops),
                    ok = hm_cluster:call(C, 1, hm_session, delete_repo, [Repo]),
                    R
                end} || Every <- [1, 10, 100]]]).


new_plain(C, Nodes, Tag) ->
    Tab = list_to_atom("sesskb_plain_" ++ integer_to_list(erlang:phash2(Tag))),
    {atomic, ok} = hm_cluster:call(C, 1, hypermnesia, create_table,
                                   [Tab, [{type, pawset}, {attributes, [k, v]},
                                          {ram_copies, Nodes}]]),
    Tab.

new_repo(C, Nodes, Tag) ->
    Repo = list_to_atom("sesskb_" ++ integer_to_list(erlang:phash2({Tag, make_ref()}))),
    ok = hm_cluster:call(C, 1, hm_session, create_repo,
                         [Repo, [{nodes, Nodes}, {storage, ram_copies}]]),
    Repo.

%% Throughput (operations per second) of N clients on node 1 sharing Ops operations, and
%% the CPU time the three nodes used per operation (microseconds: the sum of their
%% `statistics(runtime)'), which other programs on the host disturb less than throughput.
run(C, Kind, Tab, N, Ops) ->
    Per = max(1, Ops div N),
    Cpu0 = cpu(C),
    OpsPerS = hm_cluster:eval(C, 1, fun() ->
        Parent = self(),
        T0 = erlang:monotonic_time(microsecond),
        Pids = [spawn_link(?MODULE, worker, [Parent, Kind, Tab, Per, I, ?KEYS])
                || I <- lists:seq(1, N)],
        [receive {done, P} -> ok end || P <- Pids],
        T = erlang:monotonic_time(microsecond) - T0,
        Per * N * 1000000 / T
    end),
    {OpsPerS, (cpu(C) - Cpu0) * 1000 / (Per * N)}.

cpu(C) ->
    lists:sum([element(1, hm_cluster:call(C, I, erlang, statistics, [runtime]))
               || I <- hm_cluster:ids(C)]).

%% Client Seed's Ops operations: the same draws whatever the kind.
-spec worker(pid(), ec | {session, pos_integer()}, atom(), pos_integer(), pos_integer(),
             pos_integer()) -> ok.
worker(Parent, Kind, Tab, Ops, Seed, Keys) ->
    R0 = rand:seed_s(exsss, Seed),
    Handle = case Kind of
                 ec -> Tab;
                 {session, _} -> {ok, S} = hm_session:connect(Tab), S
             end,
    _ = lists:foldl(fun(I, R) ->
                            {X, R1} = rand:uniform_s(100, R),
                            {K, R2} = rand:uniform_s(Keys, R1),
                            op(Kind, Handle, X =< 80, <<K:64>>, I),
                            R2
                    end, R0, lists:seq(1, Ops)),
    case Kind of
        ec -> ok;
        _ -> ok = hm_session:close(Handle)
    end,
    Parent ! {done, self()},
    ok.

op(ec, Tab, true, K, _) ->
    _ = hypermnesia:async_ec(fun() -> mnesia:read(Tab, K) end);
op(ec, Tab, false, K, I) ->
    ok = hypermnesia:async_ec(fun() -> mnesia:write({Tab, K, value(I)}) end);
op({session, Every}, S, Read, K, I) ->
    _ = case Read of
            true -> hm_session:read(S, K);
            false -> ok = hm_session:write(S, K, ?MODULE, value(I))
        end,
    case (Every =:= 1 andalso not Read) orelse (Every > 1 andalso I rem Every =:= 0) of
        true -> ok = hm_session:publish(S);
        false -> ok
    end,
    case I rem ?REFRESH of
        0 -> ok = hm_session:refresh(S);
        _ -> ok
    end.

value(I) -> <<I:64, 0:(120 * 8)>>.

%%% ------------------------------------------------------------------ counter

counter(C, N, Ops, Keys) ->
    Nodes = hm_cluster:nodes(C),
    Repo = new_repo(C, Nodes, {counter, N, Keys}),
    Per = max(1, Ops div N),
    {OpsPerS, Sum} = hm_cluster:eval(C, 1, fun() ->
        Parent = self(),
        T0 = erlang:monotonic_time(microsecond),
        Pids = [spawn_link(lists:nth(1 + I rem length(Nodes), Nodes), ?MODULE, counter_worker,
                           [Parent, Repo, Per, I, Keys]) || I <- lists:seq(1, N)],
        Sums = [receive {done, P, S} -> S end || P <- Pids],
        T = erlang:monotonic_time(microsecond) - T0,
        {Per * N * 1000000 / T, lists:sum(Sums)}
    end),
    ok = converged(C, Repo),
    Total = hm_cluster:eval(C, 1, fun() ->
        {ok, S} = hm_session:connect(Repo),
        V = lists:sum([case hm_session:read(S, K) of {ok, X} -> X; not_found -> 0 end
                       || K <- lists:seq(1, Keys)]),
        ok = hm_session:close(S),
        V
    end),
    ok = hm_cluster:call(C, 1, hm_session, delete_repo, [Repo]),
    Row = #{clients => N, keys => Keys, ops_per_s => OpsPerS, sum => Total, expected => Sum},
    io:format("counter ~p~n", [Row]),
    Row.

%% Client Seed: Ops changes of random counters, a publish and a refresh every 100; sends
%% the sum of its changes.
-spec counter_worker(pid(), atom(), pos_integer(), pos_integer(), pos_integer()) -> ok.
counter_worker(Parent, Repo, Ops, Seed, Keys) ->
    {ok, S} = hm_session:connect(Repo),
    {_, Sum} = lists:foldl(
                 fun(I, {R, Acc}) ->
                         {K, R1} = rand:uniform_s(Keys, R),
                         {X, R2} = rand:uniform_s(2, R1),
                         D = 2 * X - 3,
                         V = case hm_session:read(S, K) of {ok, V0} -> V0; not_found -> 0 end,
                         ok = hm_session:write(S, K, hm_mrdt_counter, V + D),
                         case I rem ?REFRESH of
                             0 -> ok = hm_session:publish(S), ok = hm_session:refresh(S);
                             _ -> ok
                         end,
                         {R2, Acc + D}
                 end, {rand:seed_s(exsss, Seed), 0}, lists:seq(1, Ops)),
    ok = hm_session:close(S),
    Parent ! {done, self(), Sum},
    ok.

converged(C, Repo) ->
    hm_cluster:wait_until(
      fun() ->
              Hs = [maps:get(head, hm_cluster:call(C, I, hm_session, info, [Repo]))
                    || I <- hm_cluster:ids(C)],
              length(lists:usort(Hs)) =:= 1
      end, 120000).

%%% ------------------------------------------------------------------ log append

%% Microseconds for 100 appends (one session, each append published) to a log of Len entries,
%% written and replicated to every node before the timed appends start.
log_append(C, Type, Len) ->
    Repo = new_repo(C, hm_cluster:nodes(C), {log, Type, Len}),
    ok = hm_cluster:eval(C, 1, fun() ->
        {ok, S} = hm_session:connect(Repo),
        [ok = hm_session:write(S, log, Type, {I, <<"message">>}) || I <- lists:seq(1, Len)],
        hm_session:close(S)
    end),
    ok = converged(C, Repo),
    Us = hm_cluster:eval(C, 1, fun() ->
        {ok, S} = hm_session:connect(Repo),
        %% the fastest of ?REPEATS rounds of 100 appends (the log grows by 100 each round)
        T = lists:min(
              [begin
                   T0 = erlang:monotonic_time(microsecond),
                   [begin
                        ok = hm_session:write(S, log, Type, {Len + R * 100 + I, <<"message">>}),
                        ok = hm_session:publish(S)
                    end || I <- lists:seq(1, 100)],
                   erlang:monotonic_time(microsecond) - T0
               end || R <- lists:seq(1, ?REPEATS)]),
        ok = hm_session:close(S),
        T
    end),
    ok = hm_cluster:call(C, 1, hm_session, delete_repo, [Repo]),
    io:format("~p ~p: ~p us per 100 appends~n", [Type, Len, Us]),
    {Type, Len, Us}.

%%% ------------------------------------------------------------------ storage

storage(C, Nodes, N, Ops) ->
    Plain = new_plain(C, Nodes, storage),
    _ = run(C, ec, Plain, N, Ops),
    PlainSize = table_size(C, Plain),
    {atomic, ok} = hm_cluster:call(C, 1, hypermnesia, delete_table, [Plain]),
    Rows = [{Collect, stored(C, Nodes, N, Ops, Collect)} || Collect <- [true, false]],
    R = #{clients => N, ops => Ops, plain => PlainSize, repo => Rows},
    io:format("storage ~p~n", [R]),
    R.

stored(C, Nodes, N, Ops, Collect) ->
    _ = [ok = hm_cluster:call(C, I, application, set_env, [hypermnesia, mrdt_collect, Collect])
         || I <- hm_cluster:ids(C)],
    Repo = new_repo(C, Nodes, {storage, Collect}),
    _ = run(C, {session, 1}, Repo, N, Ops),
    ok = converged(C, Repo),
    Tab = hm_cluster:call(C, 1, hm_mrdt_store, table, [Repo]),
    %% with collection: the node's own ticks (a compaction once the branches stopped moving,
    %% then collection on every node) until the copy's size holds for three seconds
    Size = case Collect of
               true -> settled_size(C, Tab, table_size(C, Tab), 0, 20);
               false -> table_size(C, Tab)
           end,
    ok = hm_cluster:call(C, 1, hm_session, delete_repo, [Repo]),
    _ = [ok = hm_cluster:call(C, I, application, unset_env, [hypermnesia, mrdt_collect])
         || I <- hm_cluster:ids(C)],
    Size.

settled_size(_, _, Size, 3, _) -> Size;
settled_size(_, _, Size, _, 0) -> Size;
settled_size(C, Tab, Size, Same, Left) ->
    timer:sleep(1000),
    case table_size(C, Tab) of
        Size -> settled_size(C, Tab, Size, Same + 1, Left - 1);
        New -> settled_size(C, Tab, New, 0, Left - 1)
    end.

%% Records and bytes of the copy on node 1: the table's memory, plus the bytes of the
%% binaries its records hold outside it (values over 64 bytes, commits' trees and packs).
table_size(C, Tab) ->
    hm_cluster:eval(C, 1, fun() ->
        Off = ets:foldl(fun(R, A) -> A + off_heap(R) end, 0, Tab),
        {mnesia:table_info(Tab, size),
         mnesia:table_info(Tab, memory) * erlang:system_info(wordsize) + Off}
    end).

off_heap(B) when is_binary(B), byte_size(B) > 64 -> byte_size(B);
off_heap(T) when is_tuple(T) -> off_heap(tuple_to_list(T));
off_heap([H | T]) -> off_heap(H) + off_heap(T);
off_heap(M) when is_map(M) -> off_heap(maps:to_list(M));
off_heap(_) -> 0.

%%% ------------------------------------------------------------------ results

tables(#{id := Id, profile := Profile, ops := Ops, counter_ops := COps, load := {L0, L1},
         overhead := Overhead, counter := Counter, logs := Logs,
         storage := #{clients := SN, ops := SOps, plain := {PR, PB}, repo := Repo}}) ->
    [io_lib:format("Run `~s` (profile ~s): three peer nodes on one host with 2 cores shared "
                   "with other test runs (load average ~s at the start, ~s at the end).~n~n",
                   [Id, Profile, L0, L1]),
     io_lib:format("**Overhead** (~p operations shared by the clients, 80 % reads, 1000 keys, "
                   "the same operations for EC and sessions; a session refreshes every ~p of "
                   "its operations and publishes what is left when it closes, so a client with "
                   "fewer than 100 operations publishes \"every 100 ops\" once, at the end):~n~n",
                   [Ops, ?REFRESH]),
     io_lib:format("Medians of ~p rounds (each round runs EC and the three session runs in "
                   "turn; a ratio is taken within a round). Throughput (operations per second) "
                   "and its ratio:~n~n", [?REPEATS]),
     "| clients | EC ops/s | sessions ops/s, publish every write | EC / sessions | "
     "every 10 ops | EC / sessions | every 100 ops | EC / sessions |\n",
     "|---|---|---|---|---|---|---|---|\n",
     [io_lib:format("| ~p | ~p |~s~n",
                    [N, round(Ec), [io_lib:format(" ~p | ~.1f |", [round(S), R])
                                    || {_, #{ops := S, ratio := R}} <- Ses]])
      || #{clients := N, ec := {Ec, _}, sessions := Ses} <- Overhead],
     "\nCPU time of the three nodes per operation (microseconds) and its ratio:\n\n",
     "| clients | EC | sessions, publish every write | sessions / EC | every 10 ops | "
     "sessions / EC | every 100 ops | sessions / EC |\n",
     "|---|---|---|---|---|---|---|---|\n",
     [io_lib:format("| ~p | ~.1f |~s~n",
                    [N, Ec, [io_lib:format(" ~.1f | ~.1f |", [S, R])
                             || {_, #{cpu := S, cpu_ratio := R}} <- Ses]])
      || #{clients := N, ec := {_, Ec}, sessions := Ses} <- Overhead],
     io_lib:format("~n**Counter under conflicts** (~p changes of counters, publish and refresh "
                   "every ~p operations, clients spread over the 3 nodes):~n~n", [COps, ?REFRESH]),
     "| keys | clients | ops/s | sum of counters after convergence | sum of changes |\n"
     "|---|---|---|---|---|\n",
     [io_lib:format("| ~p | ~p | ~p | ~p | ~p |~n", [K, N, round(O), S, E])
      || #{clients := N, keys := K, ops_per_s := O, sum := S, expected := E} <- Counter],
     io_lib:format("~n**Log append** (100 appends, each published, to a log of N entries; the "
                   "fastest of ~p rounds):~n~n", [?REPEATS]),
     ""
     "| log | entries before | ms per 100 appends |\n|---|---|---|\n",
     [io_lib:format("| `~p` | ~p | ~.1f |~n", [T, L, Us / 1000]) || {T, L, Us} <- Logs],
     io_lib:format("~n**Storage** after ~p operations (~p clients, publish every write), "
                   "memory of the copy on node 1 (the table's own, plus the binaries its "
                   "records hold outside it: values over 64 bytes, commits' trees and "
                   "packs):~n~n", [SOps, SN]),
     "| table | records | bytes |\n|---|---|---|\n",
     io_lib:format("| plain EC table | ~p | ~p |~n", [PR, PB]),
     [io_lib:format("| repository, collection ~s | ~p | ~p (~.1fx plain) |~n",
                    [case Col of true -> "on"; false -> "off" end, R, B, B / PB])
      || {Col, {R, B}} <- Repo]].

write_results(File, Run = #{id := Id}) ->
    ok = filelib:ensure_dir(File),
    Text = [io_lib:format("# Sessions over mergeable types (~s)~n~n", [Id]), tables(Run)],
    ok = file:write_file(File, Text),
    io:format("~s", [Text]).

%% The report keeps the overhead tables of the run; the run's own file has every table.
report_tables(Run) ->
    [Head | _] = binary:split(unicode:characters_to_binary(tables(Run)),
                              <<"\n**Counter under conflicts**">>),
    [Head, "\n"].

%% Replace the part of REPORT.md between the sessions markers with this run's overhead tables.
write_report(File, Run = #{id := Id}) ->
    Begin = "<!-- BEGIN GENERATED sessions: mrdt_bench writes this part from the run; edit "
            "outside the markers -->\n",
    End = "<!-- END GENERATED sessions -->",
    {ok, B} = file:read_file(File),
    Report = binary_to_list(B),
    case {string:find(Report, Begin), string:find(Report, End)} of
        {nomatch, _} -> io:format("~s has no sessions markers; not updated~n", [File]);
        {_, nomatch} -> io:format("~s has no sessions markers; not updated~n", [File]);
        {FromBegin, FromEnd} ->
            Before = string:slice(Report, 0, length(Report) - length(FromBegin)),
            New = [Before, Begin, "\n",
                   io_lib:format("Full results: [results/~s.md](results/~s.md).~n~n", [Id, Id]),
                   report_tables(Run), "\n", FromEnd],
            ok = file:write_file(File, New),
            io:format("updated ~s (generated section sessions)~n", [File])
    end.
