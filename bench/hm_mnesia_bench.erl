%% @doc `make bench-mnesia': Mnesia's own bench program (`lib/mnesia/examples/bench' from
%% Debian's erlang-examples, the program the paper "Hypermnesia: Eventual Consistency in
%% Mnesia" ran in §5) on 3 nodes of this host, under three contexts in one `make' run:
%%
%% <ul>
%% <li>`transaction': the program as shipped (its t1, t3, t4, t5 in transactions, t2 in
%% `sync_dirty', through `mnesia_frag');</li>
%% <li>`async_dirty': the patched copy with every request in `async_dirty' (still through
%% `mnesia_frag');</li>
%% <li>`async_ec': the patched copy with every request under `async_ec' on `pawset' EC tables
%% ({@link hm_mnesia_bench_ec}: `hypermnesia:async_ec''s activity, tables named the
%% `mnesia_frag' way read as plain names).</li>
%% </ul>
%%
%% Three variants of each: `default' and `nearest' (the program's routing, and every request
%% on the node that generated it: its `always_try_nearest_node') on tables of one fragment
%% with a copy on every node; and `fragmented': 12 fragments, related tables' fragments
%% placed together by the program's own `foreign_key' properties, with the program's
%% routing. There `transaction' and `async_dirty' run Mnesia's fragmented tables through
%% `mnesia_frag', and `async_ec' runs partitioned EC tables with `hm_ec_access' (what
%% `hypermnesia:async_ec/1' runs) as the access module. The copies compared after the run
%% are then each fragment's. Each fragment has a copy on every node (`n_replicas' 3): the
%% program's generators start with `mnesia:wait_for_tables' on every table, which never
%% returns on a node without a copy of an EC table (its copies are `local_content' tables,
%% which Mnesia loads only where they are held).
%%
%% scripts/mnesia-examples copies and patches the program (only its activity, access module,
%% populate activity and table creation change). Each context is its own Erlang VM with its
%% own copy of the program in the code path ({@link main/1} `["run", ...]'), on a new
%% cluster of 3 peer nodes started by the project's harness (test/hm_cluster.erl, nodes named
%% `mbench_<context><I>_<os pid>'). The program's own configuration record is used with its
%% own defaults except: the 3 nodes as table and generator nodes, 2 generators per node,
%% `n_replicas' 3 and `n_fragments' 1 (one fragment replicated on every node, for every
%% context; `fragmented': `n_fragments' 12), and shorter phases (2 s warm-up, 10 s
%% measured, 1 s cool-down). After populating, the run waits until every node holds every
%% subscriber of its fragments (EC copies receive the populate asynchronously). The figures are the
%% program's own printout (its TPS line), captured from its output.
%%
%% `["report", Dir, Out]' reads the three results and writes the markdown file: TPS of each
%% context and the ratios, all from the same `make' run.
-module(hm_mnesia_bench).

-export([main/1, node_run/2, node_digest/1, node_backlog/0]).

-define(CONTEXTS, [transaction, async_dirty, async_ec]).
-define(ROUTINGS, ["default", "nearest", "fragmented"]).
-define(TABLES, [subscriber, group, server, session, suffix]).
-define(RUN_MS, 600000).

%% @doc `["run", Context, ResultFile]' or `["report", ResultDir, MarkdownFile]'.
-spec main([string()]) -> no_return().
main(["run", Context, Routing, Result]) ->
    Ctx = list_to_existing_atom(Context),
    Cluster = hm_cluster:start(#{nodes => 3, prefix => "mbench_" ++ Context ++ "_" ++ Routing,
                                 modules => [?MODULE, hm_mnesia_bench_ec, bench]}),
    Nodes = hm_cluster:nodes(Cluster),
    Log = filename:absname(filename:rootname(Result) ++ ".log"),
    Config = config(Nodes, Routing),
    R = try hm_cluster:call(Cluster, 1, ?MODULE, node_run, [Config, Log], ?RUN_MS)
        after hm_cluster:stop(Cluster)
        end,
    {ok, Text} = file:read_file(Log),
    Figures = maps:merge(figures(Text), R),
    ok = file:write_file(Result, io_lib:format("~p.~n", [#{context => Ctx, routing => Routing,
                                                           figures => Figures}])),
    io:format("bench-mnesia: ~p, ~s routing: ~0p~n", [Ctx, Routing, Figures]),
    halt(case maps:is_key(tps, Figures) of true -> 0; false -> 1 end);
main(["report", Dir, Out]) ->
    Rs = [begin
              File = lists:concat([C, "-", Routing, ".result"]),
              {ok, [R]} = file:consult(filename:join(Dir, File)),
              R
          end || Routing <- ?ROUTINGS, C <- ?CONTEXTS],
    ok = file:write_file(Out, unicode:characters_to_binary(report(Rs))),
    io:format("bench-mnesia: wrote ~s~n", [Out]),
    halt(0).

%% The program's own configuration (its record's defaults) with this run's changes.
config(Nodes, Routing) ->
    {Replicas, Fragments} = case Routing of
                                "fragmented" -> {length(Nodes), 12};
                                _ -> {length(Nodes), 1}
                            end,
    [{always_try_nearest_node, Routing =:= "nearest"},
     {generator_nodes, Nodes}, {table_nodes, Nodes}, {n_generators_per_node, 2},
     {n_replicas, Replicas}, {n_fragments, Fragments}, {storage_type, ram_copies},
     {generator_warmup, 2000}, {generator_duration, 10000}, {generator_cooldown, 1000},
     {statistics_detail, normal}].

%% @doc On node 1: the program's populate and generate steps, its output into `Log'; then
%% the time until the copies of every fragment of every table are the same (`converged_ms';
%% `timeout' after 60 s).
-spec node_run([{atom(), term()}], file:filename()) -> #{atom() => term()}.
node_run(Config, Log) ->
    {ok, Dev} = file:open(Log, [write]),
    Old = group_leader(),
    group_leader(Dev, self()),
    try
        C = bench:args_to_config(Config),
        _ = bench_populate:start(C),
        ok = wait_populated(Config),
        ok = bench_generate:start(C)
    after
        group_leader(Old, self()),
        ok = file:close(Dev)
    end,
    T0 = erlang:monotonic_time(millisecond),
    Nodes = proplists:get_value(table_nodes, Config),
    Copies = copies(Config, ?TABLES),
    Same = fun() ->
                   lists:all(fun({Frag, Hs}) ->
                                     length(lists:usort([rpc:call(H, ?MODULE, node_digest, [Frag])
                                                         || H <- Hs])) =:= 1
                             end, Copies)
           end,
    #{converged_ms => try hm_cluster:wait_until(Same, 60000) of
                          ok -> erlang:monotonic_time(millisecond) - T0
                      catch _:_ ->
                              {timeout, lists:sum([rpc:call(N, ?MODULE, node_backlog, [])
                                                   || N <- Nodes])}
                      end}.

%% @doc Messages waiting for this node's Mnesia transaction manager (replicated writes not
%% applied yet).
-spec node_backlog() -> non_neg_integer().
node_backlog() ->
    {message_queue_len, N} = process_info(whereis(mnesia_tm), message_queue_len),
    N.

%% @doc A digest of this node's copy of one table (a fragment of the program's tables).
-spec node_digest(atom()) -> integer().
node_digest(Tab) -> erlang:phash2(lists:sort(mnesia:dirty_select(Tab, [{'_', [], ['$_']}]))).

%% Every fragment of `Tabs' (`group' is not fragmented) and the nodes holding its copies.
copies(Config, Tabs) ->
    F = proplists:get_value(n_fragments, Config),
    [{Frag, mnesia:table_info(Frag, ram_copies) ++ mnesia:table_info(Frag, disc_copies)}
     || T <- Tabs,
        Frag <- case T of
                    group -> [group];
                    _ -> [T | [list_to_atom(lists:concat([T, "_frag", K]))
                               || K <- lists:seq(2, F)]]
                end].

%% The copies of every subscriber fragment hold as many subscribers (an EC copy gets the
%% populate writes asynchronously; each was applied by one copy before populate returned).
wait_populated(Config) ->
    Copies = copies(Config, [subscriber]),
    Sizes = fun() -> [{Frag, [{H, rpc:call(H, mnesia, table_info, [Frag, size])} || H <- Hs]}
                      || {Frag, Hs} <- Copies]
            end,
    try hm_cluster:wait_until(fun() ->
                                      lists:all(fun({_, HSs}) ->
                                                        length(lists:usort([S || {_, S} <- HSs]))
                                                            =:= 1
                                                end, Sizes())
                              end, 120000)
    catch error:{timeout, _, _} = Timeout ->
            io:format("copies not populated: ~p~n", [Sizes()]),
            error(Timeout)
    end.

%% The program's result lines.
figures(Text) ->
    Pats = [{tps, "([0-9]+) transactions per second \\(TPS\\)"},
            {tps_per_node, "([0-9]+) TPS per table node"},
            {us_per_trans, "([0-9]+) micro seconds in average per transaction"},
            {transactions, "([0-9]+) transactions\\. "}],
    maps:from_list([{K, binary_to_integer(V)}
                    || {K, P} <- Pats,
                       {match, [V]} <- [re:run(Text, P, [{capture, all_but_first, binary}])]]).

report(Rs) ->
    {{Y, Mo, D}, {H, Mi, _}} = calendar:universal_time(),
    Table = fun(Routing) ->
                    Sel = [R || R = #{routing := Ro} <- Rs, Ro =:= Routing],
                    Tps = maps:from_list([{C, maps:get(tps, F, 0)}
                                          || #{context := C, figures := F} <- Sel]),
                    Ratio = fun(C, Base) ->
                                    case maps:get(Base, Tps) of
                                        0 -> "-";
                                        B -> io_lib:format("~.2f", [maps:get(C, Tps) / B])
                                    end
                            end,
                    ["| context | TPS | TPS per table node | µs per transaction | transactions "
                     "| ratio to transaction | ratio to async_dirty | copies equal after |\n"
                     "|---|---|---|---|---|---|---|---|\n",
                     [io_lib:format("| `~s` | ~b | ~b | ~b | ~b | ~s | ~s | ~s |~n",
                                    [C, maps:get(tps, F, 0), maps:get(tps_per_node, F, 0),
                                     maps:get(us_per_trans, F, 0), maps:get(transactions, F, 0),
                                     Ratio(C, transaction), Ratio(C, async_dirty),
                                     converged(maps:get(converged_ms, F, timeout))])
                      || #{context := C, figures := F} <- Sel]]
            end,
    [io_lib:format("# Mnesia's bench program under transaction, async_dirty and async_ec~n~n"
                   "Run ~4..0b-~2..0b-~2..0b ~2..0b:~2..0b UTC with `make bench-mnesia` on this "
                   "host (~b schedulers), OTP ~s.~n~n",
                   [Y, Mo, D, H, Mi, erlang:system_info(schedulers),
                    erlang:system_info(otp_release)]),
     "The program is Mnesia's own `lib/mnesia/examples/bench` (Debian's erlang-examples), "
     "copied into `_build` and patched by `scripts/mnesia-examples` only in its activity, "
     "access module, populate activity and table creation. 3 peer nodes on this host, all "
     "of them table and generator nodes, 2 generators per node, `n_replicas` 3, "
     "`n_fragments` 1 (one fragment, a copy on every node, for every context; the last "
     "section: 12 fragments), `ram_copies`, the program's default workload mix (t1 25 %, "
     "t2 25 %, t3 20 %, t4 15 %, t5 15 %), 25,000 subscribers, 2 s warm-up, 10 s measured, "
     "1 s cool-down. `transaction` is the program as shipped (t2 runs in `sync_dirty` "
     "there); `async_dirty` and `async_ec` run every request in that context. TPS is the "
     "program's own figure: the requests its generators completed in the measured window "
     "(rolled-back t4/t5 requests included: under `async_dirty` and `async_ec` a roll-back "
     "does not undo the writes made before it), divided by the average time a generator "
     "spent in requests. \"Copies equal after\" is the time from the end of the run until "
     "every node's copy of every table is the same.\n\n",
     "## The program's routing\n\n"
     "Each request runs on the node the program picks for the subscriber's fragment among "
     "the nodes Mnesia says it can write (`where_to_write`), through a worker process there "
     "when that is another node. For the Mnesia tables that is one of the 3 nodes (2 in 3 "
     "requests go to another node and back); an EC table's copy is its node's own, so "
     "Mnesia names no node and the program runs every `async_ec` request where it was "
     "generated.\n\n",
     Table("default"),
     "\n## Every request on its own node (`always_try_nearest_node`)\n\n"
     "The program's option `always_try_nearest_node` makes it run a request on the node "
     "that generated it whenever that node holds a copy: every context then runs locally, "
     "which compares the contexts' own cost.\n\n",
     Table("nearest"),
     "\n## Fragmented: 12 fragments, placed by the program's foreign keys\n\n"
     "The program's own fragmented layout: `n_fragments` 12, `n_replicas` 3, its tables "
     "`subscriber`, `session` and `server` placed fragment by fragment with `suffix` by "
     "their `foreign_key` properties, with the program's routing (each request on a node "
     "holding the subscriber's fragment, through a worker there when that is another "
     "node). `transaction` and `async_dirty` run Mnesia's fragmented tables through "
     "`mnesia_frag`; `async_ec` runs partitioned EC tables (fragments placed on the "
     "consistent-hash ring) with `hm_ec_access`, the access module of `async_ec`, in place "
     "of `mnesia_frag`. \"Copies equal after\" compares the copies of each fragment. Each "
     "fragment has a copy on every node: the program's generators start with "
     "`mnesia:wait_for_tables` on every table, which never returns on a node without a "
     "copy of an EC table (Mnesia loads an EC table's `local_content` copies only where "
     "they are held).\n\n",
     Table("fragmented"),
     "\nEach context ran on its own new 3-node cluster, one after the other, in the same "
     "`make` run; the ratios compare figures of that run only.\n"].

converged({timeout, 0}) -> "not within 60 s, nothing left to apply: the copies differ";
converged({timeout, N}) -> io_lib:format("not within 60 s (~b writes still queued)", [N]);
converged(Ms) -> io_lib:format("~b ms", [Ms]).
