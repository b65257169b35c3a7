%% @doc Benchmark of sessions over mergeable types against plain EC tables (after "Banyan:
%% Coordination-free Distributed Transactions over Mergeable Types", section 5.2, Fig. 8, and
%% section 5.3, Fig. 11). Three peer nodes of test/hm_cluster.erl (`sesskb1_...'), a
%% repository and a plain `pawset' table on all three; the clients run on node 1.
%%
%% <ul>
%% <li>Overhead: C clients (1 to 128) share OPS operations, 80 % reads and 20 % writes of
%% 128-byte values over 1000 keys. EC: each operation is one `async_ec' read or write.
%% Sessions: one session per client; a read is `hm_session:read/2'; a write is
%% `hm_session:write/4' followed by `hm_session:publish/1' (every write its own
%% transaction, as visible as an EC write); every 100 operations the session refreshes.
%% A second session run publishes every 10 operations instead (writes between publishes
%% become visible together). Reported: throughput of each and the ratios.</li>
%% <li>Storage: the repository's records and memory after the sessions run, with history
%% collection (it runs every second) and, for comparison, the number of blocks written.</li>
%% <li>Log append: the time of 100 appends to a log already holding N entries, blob log
%% against linked log.</li>
%% </ul>
%%
%% `mrdt_bench:main(["quick" | "full", ResultsFile])'; the Makefile target
%% `bench-sessions' runs it.
-module(mrdt_bench).
-behaviour(hm_mrdt).

-export([main/1, merge/3, worker/5]).

-define(KEYS, 1000).

%% The benchmark's value type: a 128-byte string, last writer (by term order) wins, as the
%% plain table's default conflict policy.
-spec merge(term(), binary(), binary()) -> {ok, binary()}.
merge(_, A, B) -> {ok, max(A, B)}.

-spec main([string()]) -> ok.
main([Profile, File]) ->
    {Clients, Ops} = case Profile of
                         "quick" -> {[1, 8, 32, 128], 6400};
                         "full" -> {[1, 2, 4, 8, 16, 32, 64, 128], 32000}
                     end,
    C = hm_cluster:start(#{nodes => 3, prefix => "sesskb", modules => [?MODULE]}),
    try
        Nodes = hm_cluster:nodes(C),
        {atomic, ok} = hm_cluster:call(C, 1, hypermnesia, create_table,
                                       [mrdtb_plain, [{type, pawset}, {attributes, [k, v]},
                                                      {ram_copies, Nodes}]]),
        Rows = [begin
                    Repo = list_to_atom("mrdtb_" ++ integer_to_list(N)),
                    ok = hm_cluster:call(C, 1, hm_session, create_repo,
                                         [Repo, [{nodes, Nodes}, {storage, ram_copies}]]),
                    Ec = run(C, ec, mrdtb_plain, N, Ops),
                    Ses = run(C, session, Repo, N, Ops),
                    Ses10 = run(C, session10, Repo, N, Ops),
                    %% collection once every node merged the last publishes
                    ok = hm_cluster:wait_until(
                           fun() ->
                                   Hs = [maps:get(head, hm_cluster:call(C, I, hm_session, info, [Repo]))
                                         || I <- hm_cluster:ids(C)],
                                   length(lists:usort(Hs)) =:= 1
                           end, 60000),
                    _ = [hm_cluster:call(C, I, hm_session, gc, [Repo]) || I <- hm_cluster:ids(C)],
                    Info = hm_cluster:call(C, 1, hm_session, info, [Repo]),
                    #{table := #{records := Recs, words := Words}} = Info,
                    ok = hm_cluster:call(C, 1, hm_session, delete_repo, [Repo]),
                    Row = #{clients => N, ec => Ec, session => Ses, ratio => Ec / Ses,
                            session10 => Ses10, ratio10 => Ec / Ses10,
                            records => Recs, bytes => Words * erlang:system_info(wordsize)},
                    io:format("~p~n", [Row]),
                    Row
                end || N <- Clients],
        Plain = hm_cluster:call(C, 1, mnesia, table_info, [mrdtb_plain, memory]),
        Logs = [log_append(C, Type, Len) || Type <- [hm_mrdt_blob_log, hm_mrdt_linked_log],
                                            Len <- [0, 1000, 4000]],
        write_results(File, Profile, Ops, Rows, Plain * erlang:system_info(wordsize), Logs)
    after
        hm_cluster:stop(C)
    end.

%% Throughput (operations per second) of N clients sharing Ops operations.
run(C, Kind, Tab, N, Ops) ->
    Per = max(1, Ops div N),
    hm_cluster:eval(C, 1, fun() ->
        Parent = self(),
        T0 = erlang:monotonic_time(microsecond),
        Pids = [spawn_link(?MODULE, worker, [Parent, Kind, Tab, Per, I]) || I <- lists:seq(1, N)],
        [receive {done, P} -> ok end || P <- Pids],
        T = erlang:monotonic_time(microsecond) - T0,
        Per * N * 1000000 / T
    end).

-spec worker(pid(), ec | session | session10, atom(), pos_integer(), pos_integer()) -> ok.
worker(Parent, Kind, Tab, Ops, Seed) ->
    R0 = rand:seed_s(exsss, Seed),
    Handle = case Kind of
                 ec -> Tab;
                 _ -> {ok, S} = hm_session:connect(Tab), S
             end,
    _ = lists:foldl(fun(I, R) ->
                            {X, R1} = rand:uniform_s(100, R),
                            {K, R2} = rand:uniform_s(?KEYS, R1),
                            op(Kind, Handle, X =< 80, K, I),
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
op(session, S, true, K, I) ->
    _ = hm_session:read(S, K),
    refresh(S, I);
op(session, S, false, K, I) ->
    ok = hm_session:write(S, K, ?MODULE, value(I)),
    ok = hm_session:publish(S),
    refresh(S, I);
op(session10, S, Read, K, I) ->
    _ = case Read of
            true -> hm_session:read(S, K);
            false -> ok = hm_session:write(S, K, ?MODULE, value(I))
        end,
    case I rem 10 of
        0 -> ok = hm_session:publish(S);
        _ -> ok
    end,
    refresh(S, I).

refresh(S, I) when I rem 100 =:= 0 -> ok = hm_session:refresh(S);
refresh(_, _) -> ok.

value(I) -> <<I:64, 0:(120 * 8)>>.

%% Microseconds for 100 appends (one session, each append published) to a log of Len entries.
log_append(C, Type, Len) ->
    Repo = list_to_atom("mrdtb_log_" ++ atom_to_list(Type) ++ integer_to_list(Len)),
    ok = hm_cluster:call(C, 1, hm_session, create_repo, [Repo, [{nodes, hm_cluster:nodes(C)}]]),
    Us = hm_cluster:eval(C, 1, fun() ->
        {ok, S} = hm_session:connect(Repo),
        [ok = hm_session:write(S, log, Type, {I, <<"message">>}) || I <- lists:seq(1, Len)],
        ok = hm_session:publish(S),
        T0 = erlang:monotonic_time(microsecond),
        [begin
             ok = hm_session:write(S, log, Type, {Len + I, <<"message">>}),
             ok = hm_session:publish(S)
         end || I <- lists:seq(1, 100)],
        T = erlang:monotonic_time(microsecond) - T0,
        ok = hm_session:close(S),
        T
    end),
    ok = hm_cluster:call(C, 1, hm_session, delete_repo, [Repo]),
    io:format("~p ~p: ~p us per 100 appends~n", [Type, Len, Us]),
    {Type, Len, Us}.

write_results(File, Profile, Ops, Rows, PlainBytes, Logs) ->
    ok = filelib:ensure_dir(File),
    Lines = [io_lib:format("# Sessions over mergeable types against plain EC tables (~s, ~p operations, "
                           "80 % reads)~n~n", [Profile, Ops]),
             "| clients | EC ops/s | session ops/s, publish every write | EC / session | "
             "session ops/s, publish every 10 ops | EC / session | repo records after | "
             "repo bytes after |\n",
             "|---|---|---|---|---|---|---|---|\n",
             [io_lib:format("| ~p | ~.1f | ~.1f | ~.2f | ~.1f | ~.2f | ~p | ~p |~n",
                            [N, Ec, Ses, Ratio, Ses10, Ratio10, Recs, Bytes])
              || #{clients := N, ec := Ec, session := Ses, ratio := Ratio, session10 := Ses10,
                   ratio10 := Ratio10, records := Recs, bytes := Bytes} <- Rows],
             io_lib:format("~nPlain EC table after every run: ~p bytes.~n~n", [PlainBytes]),
             "| log | entries before | us per 100 appends |\n|---|---|---|\n",
             [io_lib:format("| ~p | ~p | ~p |~n", [T, L, Us]) || {T, L, Us} <- Logs]],
    ok = file:write_file(File, Lines),
    io:format("~s", [Lines]).
