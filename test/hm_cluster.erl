%% @doc A cluster of real Erlang nodes on this host, for tests, benchmarks and demos: start
%% OTP `peer' nodes, give them one Mnesia schema, start Hypermnesia, call functions on them,
%% cut the network between chosen nodes and heal it, restart a node or Mnesia alone.
%%
%% <h3>Nodes</h3>
%% {@link start/1} starts `N' peer nodes named `<prefix><I>_<os pid>' (`I' = 1..N, the index
%% every other function takes). They are controlled over standard I/O, not over Erlang
%% distribution, so cutting their links never cuts the caller's control. Each is started with
%% `-connect_all false' (a node connects only to the nodes it talks to) and
%% `-kernel prevent_overlapping_partitions false' (a cut between two nodes does not make
%% `global' disconnect others), its own Mnesia directory `<dir>/<name>' and its own log file
%% `<dir>/<name>.log'. Node 1 creates the schema on every node; each node then starts
%% Hypermnesia (or only Mnesia), and `start/1' returns once Mnesia runs as one cluster.
%% {@link add_node/1} starts one more and joins it to the schema; {@link kill/2} kills one
%% (it keeps its index, down, until {@link restart/2}). {@link status/2} says whether a node
%% is up, still starting (a restart waiting for Mnesia's start) or down.
%%
%% <h3>Partitions</h3>
%% {@link cut/3} gives each node of one side a wrong cookie for every node of the other side
%% (a different one per side, so the handshake fails both ways) and disconnects them: traffic
%% is dropped and reconnection refused until {@link heal/1} restores the cookies. Nothing here
%% reconnects the nodes: Hypermnesia does it by itself, and `heal/1' waits until it did
%% (Mnesia's `running_db_nodes' whole on every node). Cuts add up; `heal/1' removes them all.
%% A node restarted while cut gets the cut's cookies before it connects to anyone.
%%
%% Such a cut is clean: both sides see `nodedown' at once. A real netsplit is silent: packets
%% are lost, the connection stays up, whatever is sent fills its buffers, and a node notices
%% only when the distribution's tick time runs out (`net_ticktime', 60 s by default). With
%% the option `network => netns' (Linux, as root, with `ip' from iproute2) each node runs in
%% a network namespace of its own, on a bridge of private addresses (`10.77.0.I', long node
%% names), and {@link cut/3} adds a `blackhole' route to the other side on each side: every
%% packet between them is dropped, silently. It returns at once; {@link heal/1} deletes the
%% routes. A cut shorter than the tick time leaves the connections up, and whatever waited in
%% their buffers arrives after the heal. {@link netns_available/0} says whether this host can.
%%
%% <h3>State</h3>
%% A cluster is a small process holding the peers, the nodes and the current cuts, so a
%% cluster started in one process (a Common Test `init_per_group') can be used from others
%% (the test cases) and outlives the one that started it. {@link stop/1} stops the nodes and
%% that process. Changes to the links and the members ({@link cut/3}, {@link heal/2},
%% {@link kill/2}, and the part of {@link restart/3} and {@link add_node/1} that starts a node
%% and gives it its cookies) run one at a time, so that a restart running in another process
%% (it may block in Mnesia's start, see {@link restart/3}) and a cut cannot mix their cookies.
%%
%% <h3>Waiting</h3>
%% Nothing here sleeps for a fixed time. {@link wait_until/2} polls a condition every 50 ms up
%% to a deadline and fails with the last value it saw.
%%
%% Example:
%% ```
%% C = hm_cluster:start(#{nodes => 3, dir => PrivDir, modules => [?MODULE]}),
%% {atomic, ok} = hm_cluster:call(C, 1, hypermnesia, create_table,
%%                                [t, [{type, pawset}, {ram_copies, hm_cluster:nodes(C)}]]),
%% ok = hm_cluster:cut(C, [1, 2], [3]),
%% ok = hm_cluster:eval(C, 3, fun() -> hypermnesia:async_ec(fun() -> mnesia:write({t, 1, x}) end) end),
%% ok = hm_cluster:heal(C),
%% ok = hm_cluster:wait_until(fun() -> hm_cluster:call(C, 1, mnesia, dirty_read, [t, 1]) =/= [] end, 30000),
%% ok = hm_cluster:stop(C).
%% '''
-module(hm_cluster).

-export([start/1, stop/1, nodes/1, node/2, ids/1, status/2, call/5, call/6, eval/3, cut/3,
         heal/1, heal/2, stop_mnesia/2, start_mnesia/2, restart/2, restart/3, kill/2,
         add_node/1, add_node/2, wait_until/2, netsplit_filter/2, netns_available/0, netns_address/1]).
-export_type([cluster/0, options/0, id/0, status/0]).

-compile({no_auto_import, [nodes/1]}).

-opaque cluster() :: pid().
%% The index of a node: 1 for the first node started, and so on.
-type id() :: pos_integer().
%% `up': Hypermnesia (or Mnesia) was started on the node and returned; `starting': the node
%% runs (it takes part in cuts and heals) but that start has not returned yet; `down': killed.
-type status() :: up | starting | down.
-type options() ::
        #{nodes => pos_integer(),
          dir => file:filename(),
          prefix => string(),
          modules => [module()],
          args => [string()],
          node_args => fun((id()) -> [string()]),
          ebin => fun((id()) -> file:filename() | default),
          app_env => [{atom(), term()}],
          hypermnesia => boolean(),
          log_filter => {logger:filter_id(), logger:filter()},
          network => loopback | netns}.
%% <ul>
%% <li>`nodes': how many (default 3).</li>
%% <li>`dir': where the Mnesia directories and node logs go (default: a new directory under
%% `$TMPDIR' or `/tmp', deleted by {@link stop/1}; a given one is kept).</li>
%% <li>`prefix': of the node names (default `"hm"'). Two clusters that run at the same time,
%% or one after the other in the same `dir', need different prefixes.</li>
%% <li>`modules': modules whose directories the nodes get in their code path, besides
%% `hypermnesia''s, so that funs written there can run on them (default none).</li>
%% <li>`args': more command-line arguments for every node (default none).</li>
%% <li>`node_args': a fun giving node `I' more command-line arguments of its own, after
%% `args' (default none), for example its own TLS certificate.</li>
%% <li>`ebin': a fun giving the directory of the `hypermnesia' application's beams node `I'
%% runs, or `default' (the caller's), for example another release's build.</li>
%% <li>`app_env': `hypermnesia' application environment set before it starts (default
%% `[{max_backoff_ms, 500}]': a healed node is pinged again within half a second).</li>
%% <li>`hypermnesia': start Hypermnesia (default `true'); `false' starts Mnesia only, and then
%% {@link heal/1} cannot wait for Mnesia to re-join (nothing re-joins it).</li>
%% <li>`log_filter': a logger primary filter added on every node before Mnesia starts, for
%% example `{Id, {fun hm_cluster:netsplit_filter/2, []}}' to drop the reports a partition
%% is expected to cause. Its fun must be in a module the nodes can load.</li>
%% <li>`network': `loopback' (the default), or `netns': a network namespace per node, and
%% silent cuts (see Partitions above). Give the nodes a short tick time with `args'
%% (`["-kernel", "net_ticktime", "8"]') to see a silent cut turn into a disconnection.</li>
%% </ul>

-define(CALL_MS, 30000).
-define(START_MS, 60000).
-define(HEAL_MS, 60000).
-define(POLL_MS, 50).

%%% ------------------------------------------------------------- start and stop

%% @doc Start a cluster (see the module doc and {@link options()}). Fails (an exception) if a
%% node cannot be started or Mnesia does not run as one cluster within 60 s.
-spec start(options()) -> cluster().
start(Opts) ->
    _ = os:cmd("epmd -daemon"),
    N = maps:get(nodes, Opts, 3),
    {Dir, Owned} = case maps:find(dir, Opts) of
                       {ok, D} -> {filename:absname(D), false};
                       error -> {new_dir(), true}
                   end,
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    Cookie = case is_alive() of
                 true -> erlang:get_cookie();
                 false -> list_to_atom("hm_cluster_" ++ os:getpid())
             end,
    Prefix = maps:get(prefix, Opts, "hm"),
    Ebin = filename:absname(filename:dirname(code:which(hypermnesia))),
    Paths = lists:append([["-pa", D]
                          || D <- lists:usort([filename:absname(filename:dirname(code:which(M)))
                                                 || M <- maps:get(modules, Opts, [])]),
                             D =/= Ebin]),
    EbinOf = maps:get(ebin, Opts, fun(_) -> default end),
    S0 = #{dir => Dir, owned => Owned, cookie => Cookie, prefix => Prefix,
           args => ["-setcookie", atom_to_list(Cookie)] ++ maps:get(args, Opts, []),
           node_args => fun(I) ->
                                NodeEbin = case EbinOf(I) of
                                               default -> Ebin;
                                               E -> filename:absname(E)
                                           end,
                                %% of several -pa, the last comes first in the path
                                Paths ++ ["-pa", NodeEbin]
                                    ++ (maps:get(node_args, Opts, fun(_) -> [] end))(I)
                        end,
           app_env => maps:get(app_env, Opts, [{max_backoff_ms, 500}]),
           hypermnesia => maps:get(hypermnesia, Opts, true),
           log_filter => maps:get(log_filter, Opts, none),
           network => network(maps:get(network, Opts, loopback)),
           cuts => [], members => #{}},
    Names = [name(Prefix, I) || I <- lists:seq(1, N)],
    Members = try maps:from_list([{I, start_peer(S0, I, Name)}
                                  || {I, Name} <- lists:zip(lists:seq(1, N), Names)])
              catch C1:R1:St1 -> netns_delete(S0), erlang:raise(C1, R1, St1)
              end,
    S = S0#{members := Members},
    try
        Nodes = [maps:get(node, maps:get(I, Members)) || I <- lists:seq(1, N)],
        [pong = pcall(S, 1, net_adm, ping, [Nd]) || Nd <- tl(Nodes)],
        ok = pcall(S, 1, mnesia, create_schema, [Nodes]),
        [ok = start_node_apps(S, I) || I <- lists:seq(1, N)],
        ok = wait_whole(S, lists:seq(1, N), ?START_MS)
    catch Class:Reason:Stack ->
            stop_peers(S),
            netns_delete(S),
            erlang:raise(Class, Reason, Stack)
    end,
    Up = S#{members := maps:map(fun(_, M) -> M#{status := up} end, Members)},
    spawn(fun() -> holder(Up, none) end).

%% @doc Stop every node of the cluster, and delete its directory if {@link start/1} made it.
-spec stop(cluster()) -> ok.
stop(C) ->
    S = state(C),
    stop_peers(S),
    netns_delete(S),
    _ = case S of
            #{owned := true, dir := Dir} -> file:del_dir_r(Dir);
            _ -> ok
        end,
    C ! stop,
    ok.

%%% ------------------------------------------------------------- nodes and calls

%% @doc The node names, by index (a node that was killed keeps its place).
-spec nodes(cluster()) -> [node()].
nodes(C) ->
    #{members := Ms} = state(C),
    [maps:get(node, maps:get(I, Ms)) || I <- lists:sort(maps:keys(Ms))].

%% @doc The name of node `I'.
-spec node(cluster(), id()) -> node().
node(C, I) -> maps:get(node, member(state(C), I)).

%% @doc The indexes of the nodes: `[1, ..., N]'.
-spec ids(cluster()) -> [id()].
ids(C) -> lists:sort(maps:keys(maps:get(members, state(C)))).

%% @doc Whether node `I' is `up', `starting' or `down' (see {@link status()}). A client that
%% must not call a node while its Mnesia starts (a call would wait for it) asks this first.
%% Stopping Mnesia alone ({@link stop_mnesia/2}) leaves a node `up'.
-spec status(cluster(), id()) -> status().
status(C, I) ->
    case member(state(C), I) of
        #{peer := down} -> down;
        #{status := St} -> St
    end.

%% @doc `apply(M, F, A)' on node `I' (30 s at most). An exception there is raised here.
-spec call(cluster(), id(), module(), atom(), list()) -> term().
call(C, I, M, F, A) -> call(C, I, M, F, A, ?CALL_MS).

%% @doc {@link call/5} with a time limit in milliseconds (or `infinity').
-spec call(cluster(), id(), module(), atom(), list(), timeout()) -> term().
call(C, I, M, F, A, Timeout) -> pcall(state(C), I, M, F, A, Timeout).

%% @doc Run a fun of no arguments on node `I' and return what it returns. The fun's module
%% must be loadable there (option `modules' of {@link start/1}).
-spec eval(cluster(), id(), fun(() -> R)) -> R.
eval(C, I, Fun) -> call(C, I, erlang, apply, [Fun, []]).

%%% ------------------------------------------------------------- partitions

%% @doc Cut every node of `Side1' from every node of `Side2' (indexes), and return once no
%% such pair is connected. Links inside a side, and cuts made before, stay as they are. With
%% `network => netns' the cut is silent and it returns at once (see Partitions above).
-spec cut(cluster(), [id()], [id()]) -> ok.
cut(C, Side1, Side2) ->
    with_lock(C, fun() -> cut_locked(C, Side1, Side2) end).

cut_locked(C, Side1, Side2) ->
    S = state(C),
    Pairs = [{I, J} || I <- Side1, J <- Side2, I =/= J],
    Cuts = lists:usort(maps:get(cuts, S) ++ Pairs ++ [{J, I} || {I, J} <- Pairs]),
    update(C, fun(St) -> St#{cuts := Cuts} end),
    S1 = S#{cuts := Cuts},
    case S of
        #{network := {netns, _}} ->
            %% silent: nothing is told, nothing is waited for
            lists:foreach(fun({I, J}) -> ok = route(S, add, I, J) end,
                          Cuts -- maps:get(cuts, S));
        _ ->
            cut_cookies(S1, Cuts)
    end.

cut_cookies(S1, Cuts) ->
    %% cookies first, so that no reconnection attempt can get through in between
    [ok = set_cookies(S1, I) || I <- up(S1)],
    %% (false when the other direction already disconnected the pair)
    _ = [pcall(S1, I, erlang, disconnect_node, [node_of(S1, J)])
         || {I, J} <- Cuts, lists:member(I, up(S1))],
    Live = [{I, J} || {I, J} <- Cuts, lists:member(I, up(S1))],
    wait_until(fun() ->
                       Connected = [{I, J} || {I, J} <- Live,
                                              lists:member(node_of(S1, J),
                                                           pcall(S1, I, erlang, nodes, []))],
                       Connected =:= [] orelse {still_connected, Connected}
               end, ?CALL_MS).

%% @doc Remove every cut (restore the cookies, or delete the routes), then wait, up to 60 s,
%% until every node that is up runs Mnesia with all of them (`running_db_nodes'):
%% Hypermnesia reconnects the nodes and re-joins Mnesia by itself. Without Hypermnesia
%% (`hypermnesia => false') it only restores the cookies. Same as `heal(C, #{})'.
-spec heal(cluster()) -> ok.
heal(C) -> heal(C, #{}).

%% @doc {@link heal/1} with options: `wait => false' returns as soon as the cookies are
%% restored (to watch the reconnection yourself); `timeout' (ms, default 60000) bounds the
%% wait.
-spec heal(cluster(), #{wait => boolean(), timeout => non_neg_integer()}) -> ok.
heal(C, Opts) ->
    S = with_lock(C, fun() ->
                             S0 = state(C),
                             update(C, fun(St) -> St#{cuts := []} end),
                             S1 = state(C),
                             _ = case S1 of
                                     #{network := {netns, _}} ->
                                         [ok = route(S1, del, I, J)
                                          || {I, J} <- maps:get(cuts, S0)];
                                     _ -> [ok = set_cookies(S1, I) || I <- up(S1)]
                                 end,
                             S1
                     end),
    case {S, maps:get(wait, Opts, true)} of
        {#{hypermnesia := true}, true} -> wait_whole(S, up(S), maps:get(timeout, Opts, ?HEAL_MS));
        _ -> ok
    end.

%%% ------------------------------------------------------------- restarts

%% @doc Stop Mnesia alone on node `I' (`mnesia:stop/0'); the node and the `hypermnesia'
%% application keep running.
-spec stop_mnesia(cluster(), id()) -> ok.
stop_mnesia(C, I) ->
    stopped = call(C, I, mnesia, stop, []),
    ok.

%% @doc Start Mnesia again on node `I' and wait until it has loaded its tables and every
%% node that is up runs Mnesia with all of them (unless cuts keep them apart).
-spec start_mnesia(cluster(), id()) -> ok.
start_mnesia(C, I) ->
    ok = call(C, I, mnesia, start, []),
    S = state(C),
    ok = pcall(S, I, mnesia, wait_for_tables,
               [pcall(S, I, mnesia, system_info, [local_tables]), ?START_MS], ?START_MS + 1000),
    case S of
        #{cuts := []} -> wait_whole(S, up(S), ?START_MS);
        _ -> ok
    end.

%% @doc Stop node `I' (if it is up) and start it again: same name, same Mnesia directory,
%% the current cuts' cookies; then start Hypermnesia (or Mnesia) on it. Returns once its
%% Mnesia has loaded its tables and, with no cut, runs with every node that is up. Same as
%% `restart(C, I, #{})'.
-spec restart(cluster(), id()) -> ok.
restart(C, I) -> restart(C, I, #{}).

%% @doc {@link restart/2} with options: `wait => false' returns as soon as Hypermnesia (or
%% Mnesia) has started on the node, without waiting for its tables or the cluster. The node
%% is {@link status/2} `starting' from the moment it runs until then, `up' after.
%%
%% The start may block: Mnesia's start merges the schema with the nodes it reaches, and
%% when the cuts are not transitive (a node that reaches two sides which do not reach each
%% other) it waits until they heal. Run such a restart in a process of its own; cuts and
%% heals made meanwhile apply to the starting node too.
-spec restart(cluster(), id(), #{wait => boolean()}) -> ok.
restart(C, I, Opts) ->
    S = with_lock(C, fun() -> restart_peer(C, I) end),
    ok = start_node_apps(S, I),
    mark_up(C, S, I),
    case maps:get(wait, Opts, true) of
        true ->
            ok = pcall(S, I, mnesia, wait_for_tables,
                       [pcall(S, I, mnesia, system_info, [local_tables]), ?START_MS],
                       ?START_MS + 1000),
            case state(C) of
                S1 = #{cuts := []} -> wait_whole(S1, up(S1), ?START_MS);
                _ -> ok
            end;
        false -> ok
    end.

%% Start node I again and give it the current cuts' cookies; returns the state with it.
restart_peer(C, I) ->
    S0 = state(C),
    #{name := Name, peer := Old} = member(S0, I),
    _ = case Old of
            down -> ok;
            _ -> stop_peer(Old)
        end,
    M = start_peer_retry(S0, I, Name, erlang:monotonic_time(millisecond) + ?CALL_MS),
    update(C, fun(St = #{members := Ms}) -> St#{members := Ms#{I := M}} end),
    S = state(C),
    ok = set_cookies(S, I),
    _ = [pcall(S, I, net_adm, ping, [node_of(S, J)])
         || J <- up(S), J =/= I, not lists:member({I, J}, maps:get(cuts, S))],
    S.

%% @doc Start one more node, join it to the Mnesia cluster (`extra_db_nodes', schema on
%% disc) and start Hypermnesia (or Mnesia) on it. Returns its index. It holds no table copy
%% yet: add them with `hypermnesia:add_table_copy/3'. A node that is cut from every other
%% cannot join.
-spec add_node(cluster()) -> id().
add_node(C) -> add_node(C, #{}).

%% @doc {@link add_node/1}, with `#{schema => ram_copies}' for a node whose schema stays in
%% RAM (`disc_copies', the default, puts it on disc).
-spec add_node(cluster(), #{schema => ram_copies | disc_copies}) -> id().
add_node(C, Opts) ->
    {I, J, S} = with_lock(C, fun() -> add_peer(C) end),
    ok = pcall(S, I, mnesia, start, [], ?START_MS),
    Node = node_of(S, I),
    {ok, [Node]} = pcall(S, J, mnesia, change_config, [extra_db_nodes, [Node]]),
    _ = maps:get(schema, Opts, disc_copies) =:= disc_copies andalso
        ({atomic, ok} = pcall(S, J, mnesia, change_table_copy_type,
                              [schema, Node, disc_copies])),
    ok = case S of
             #{hypermnesia := true} -> start_node_apps(S, I);
             _ -> ok
         end,
    mark_up(C, S, I),
    ok = case S of
             #{cuts := []} -> wait_whole(S, up(S), ?START_MS);
             _ -> ok
         end,
    I.

%% Start the next node, give it the cuts' cookies and connect it to a node it reaches;
%% returns its index, that node's and the state with it.
add_peer(C) ->
    S0 = #{prefix := Prefix, members := Ms0} = state(C),
    I = lists:max(maps:keys(Ms0)) + 1,
    M = start_peer(S0, I, name(Prefix, I)),
    update(C, fun(St = #{members := Ms}) -> St#{members := Ms#{I => M}} end),
    S = state(C),
    ok = set_cookies(S, I),
    [J | _] = [J || J <- up(S), J =/= I],
    pong = pcall(S, I, net_adm, ping, [node_of(S, J)]),
    {I, J, S}.

%% @doc Kill node `I' at once (`kill -9' of its OS process), as a crash would. It stays down
%% until {@link restart/2}.
-spec kill(cluster(), id()) -> ok.
kill(C, I) ->
    with_lock(C, fun() -> kill_locked(C, I) end).

kill_locked(C, I) ->
    S = state(C),
    #{os_pid := OsPid, peer := P} = member(S, I),
    Ref = monitor(process, P),
    _ = os:cmd("kill -9 " ++ OsPid),
    receive {'DOWN', Ref, process, P, _} -> ok
    after ?CALL_MS -> error({not_killed, I})
    end,
    update(C, fun(St = #{members := Ms}) ->
                      St#{members := Ms#{I := (maps:get(I, Ms))#{peer := down}}}
              end).

%%% ------------------------------------------------------------- waiting

%% @doc Poll `F' every 50 ms until it returns `true', for at most `TimeoutMs' milliseconds.
%% An exception in `F' counts as "not yet". Fails with `error({timeout, TimeoutMs, Last})',
%% `Last' being what `F' returned (or raised) the last time.
-spec wait_until(fun(() -> term()), non_neg_integer()) -> ok.
wait_until(F, TimeoutMs) ->
    wait_until(F, erlang:monotonic_time(millisecond) + TimeoutMs, TimeoutMs).

wait_until(F, Deadline, TimeoutMs) ->
    Last = try F() catch Class:Reason -> {Class, Reason} end,
    case Last of
        true -> ok;
        _ ->
            case erlang:monotonic_time(millisecond) >= Deadline of
                true -> error({timeout, TimeoutMs, Last});
                false -> timer:sleep(?POLL_MS), wait_until(F, Deadline, TimeoutMs)
            end
    end.

%%% ------------------------------------------------------------- internals

new_dir() ->
    Tmp = case os:getenv("TMPDIR") of
              false -> "/tmp";
              "" -> "/tmp";
              T -> T
          end,
    filename:join(Tmp, lists:concat(["hm_cluster_", os:getpid(), "_",
                                     erlang:unique_integer([positive])])).

name(Prefix, I) -> list_to_atom(lists:concat([Prefix, I, "_", os:getpid()])).

%% Right after a kill -9 the name may still be registered for a moment.
start_peer_retry(S, I, Name, Deadline) ->
    try start_peer(S, I, Name)
    catch _:_ ->
            case erlang:monotonic_time(millisecond) < Deadline of
                true -> timer:sleep(100), start_peer_retry(S, I, Name, Deadline);
                false -> start_peer(S, I, Name)
            end
    end.

start_peer(S = #{dir := Dir, args := Args, node_args := NodeArgs, log_filter := Filter}, I,
           Name) ->
    MnesiaDir = "\"" ++ filename:join(Dir, atom_to_list(Name)) ++ "\"",
    {ok, P, Node} = peer:start((network_opts(S, I))#{
                                 name => Name, connection => standard_io,
                                 args => Args ++ NodeArgs(I) ++ ["-connect_all", "false",
                                                  "-kernel", "prevent_overlapping_partitions",
                                                  "false", "-mnesia", "dir", MnesiaDir]}),
    Log = filename:join(Dir, atom_to_list(Name) ++ ".log"),
    ok = peer:call(P, logger, add_handler, [file, logger_std_h, #{config => #{file => Log}}]),
    ok = case Filter of
             none -> ok;
             {Id, F} -> peer:call(P, logger, add_primary_filter, [Id, F])
         end,
    #{name => Name, node => Node, peer => P, os_pid => peer:call(P, os, getpid, []),
      status => starting}.

start_node_apps(S = #{hypermnesia := true, app_env := Env}, I) ->
    ok = pcall(S, I, application, load, [hypermnesia]),
    [ok = pcall(S, I, application, set_env, [hypermnesia, K, V]) || {K, V} <- Env],
    pcall(S, I, hypermnesia, start, [], ?START_MS);
start_node_apps(S, I) ->
    pcall(S, I, mnesia, start, [], ?START_MS).

stop_peers(#{members := Ms}) ->
    _ = [stop_peer(P) || #{peer := P} <- maps:values(Ms), is_pid(P)],
    ok.

%% Stop a peer node that may be gone already.
stop_peer(P) ->
    try peer:stop(P) catch exit:_ -> ok end.

%% Node `I' gets the right cookie for every node it is not cut from, a wrong one (its own,
%% per side) for the others.
set_cookies(#{network := {netns, _}}, _) -> ok;      % its cuts are routes in its namespace
set_cookies(S = #{cookie := Cookie, cuts := Cuts}, I) ->
    [true = pcall(S, I, erlang, set_cookie,
                  [node_of(S, J), case lists:member({I, J}, Cuts) of
                                      true -> list_to_atom("cut" ++ integer_to_list(I));
                                      false -> Cookie
                                  end])
     || J <- lists:sort(maps:keys(maps:get(members, S))), J =/= I],
    ok.

wait_whole(S, Ids, TimeoutMs) ->
    Whole = lists:sort([node_of(S, I) || I <- Ids]),
    wait_until(fun() ->
                       Running = [lists:sort(pcall(S, I, mnesia, system_info, [running_db_nodes]))
                                  || I <- Ids],
                       lists:all(fun(R) -> R =:= Whole end, Running) orelse Running
               end, TimeoutMs).

%% Node I, as it is in S, has started its applications (unless it was killed or restarted
%% again meanwhile).
mark_up(C, S, I) ->
    #{peer := P} = member(S, I),
    update(C, fun(St = #{members := Ms}) ->
                      case maps:get(I, Ms) of
                          M = #{peer := P} -> St#{members := Ms#{I := M#{status := up}}};
                          _ -> St
                      end
              end).

%% The nodes that run (up or starting): they take part in cuts and heals.
up(#{members := Ms}) -> lists:sort([I || {I, #{peer := P}} <- maps:to_list(Ms), is_pid(P)]).

member(#{members := Ms}, I) ->
    case maps:find(I, Ms) of
        {ok, M} -> M;
        error -> error({no_such_node, I})
    end.

node_of(S, I) -> maps:get(node, member(S, I)).

pcall(S, I, M, F, A) -> pcall(S, I, M, F, A, ?CALL_MS).

pcall(S, I, M, F, A, Timeout) ->
    case member(S, I) of
        #{peer := down} -> error({node_down, I});
        #{peer := P} -> peer:call(P, M, F, A, Timeout)
    end.

%% The process that holds the cluster's state, and the lock of with_lock/2: `none' or its
%% owner's pid and monitor (a lock request waits in the mailbox until the lock is free; an
%% owner that dies frees it).
holder(S, Lock) ->
    receive
        {get, From, Ref} -> From ! {Ref, S}, holder(S, Lock);
        {update, Fun, From, Ref} -> S1 = Fun(S), From ! {Ref, ok}, holder(S1, Lock);
        {lock, From, Ref} when Lock =:= none ->
            From ! {Ref, ok},
            holder(S, {From, monitor(process, From)});
        {unlock, From, Ref} when element(1, Lock) =:= From ->
            demonitor(element(2, Lock), [flush]),
            From ! {Ref, ok},
            holder(S, none);
        {'DOWN', MRef, process, _, _} when element(2, Lock) =:= MRef -> holder(S, none);
        stop -> ok
    end.

state(C) -> request(C, fun(Ref) -> {get, self(), Ref} end).

update(C, Fun) -> request(C, fun(Ref) -> {update, Fun, self(), Ref} end).

%% Run F with the cluster's lock: changes to links and members one at a time.
with_lock(C, F) ->
    ok = request(C, fun(Ref) -> {lock, self(), Ref} end),
    try F()
    after ok = request(C, fun(Ref) -> {unlock, self(), Ref} end)
    end.

request(C, Msg) ->
    Ref = monitor(process, C),
    C ! Msg(Ref),
    receive
        {Ref, Reply} -> demonitor(Ref, [flush]), Reply;
        {'DOWN', Ref, process, C, _} -> error(cluster_stopped)
    end.

%%% ------------------------------------------------------------- network namespaces

%% @doc Whether this host can run a cluster with `network => netns': `ip' is there and a
%% network namespace can be made (Linux, as root).
-spec netns_available() -> boolean().
netns_available() ->
    Ns = "hmprobe" ++ os:getpid(),
    case ip(["netns", "add", Ns]) of
        ok -> ok =:= ip(["netns", "del", Ns]);
        {error, _} -> false
    end.

network(loopback) -> loopback;
network(netns) ->
    %% the namespaces' names: this cluster's own prefix, then `_br' (the bridge) or `_I'
    Base = lists:concat(["hm", os:getpid(), "_", erlang:unique_integer([positive])]),
    S = #{network => {netns, Base}},
    Br = ns(S, br),
    case ip(["netns", "add", Br]) of
        ok ->
            ok = ip(["-n", Br, "link", "add", "br0", "type", "bridge"]),
            ok = ip(["-n", Br, "link", "set", "br0", "up"]),
            maps:get(network, S);
        {error, Out} -> error({netns_unavailable, Out})
    end.

%% The peer options that start node `I' in its namespace (made here), on its address.
network_opts(#{network := loopback}, _) -> #{};
network_opts(S = #{network := {netns, _}}, I) when I < 255 ->
    Ns = ns(S, I),
    _ = ip(["netns", "add", Ns]),                       % kept from a start before
    V = "b" ++ integer_to_list(I),
    _ = case ip(["-n", ns(S, br), "link", "add", V, "type", "veth", "peer", "name", "v0",
                 "netns", Ns]) of
            ok ->
                ok = ip(["-n", ns(S, br), "link", "set", V, "master", "br0"]),
                ok = ip(["-n", ns(S, br), "link", "set", V, "up"]),
                ok = ip(["-n", Ns, "addr", "add", address(I) ++ "/24", "dev", "v0"]),
                ok = ip(["-n", Ns, "link", "set", "v0", "up"]),
                ok = ip(["-n", Ns, "link", "set", "lo", "up"]);
            {error, _} -> ok
        end,
    #{host => address(I), longnames => true,
      exec => {os:find_executable("ip"), ["netns", "exec", Ns, os:find_executable("erl")]}}.

%% Drop (`add') or let through again (`del') every packet from node I to node J.
route(S, Op, I, J) -> ip(["-n", ns(S, I), "route", atom_to_list(Op), "blackhole",
                          address(J) ++ "/32"]).

%% Delete the namespaces, and end what still runs in them (each has its own `epmd').
netns_delete(#{network := loopback}) -> ok;
netns_delete(#{network := {netns, Base}}) ->
    Ours = [Ns || Line <- string:split(os:cmd("ip netns list"), "\n", all),
                  [Ns | _] <- [string:lexemes(Line, " ")],
                  lists:prefix(Base ++ "_", Ns)],
    lists:foreach(fun(Ns) ->
                          _ = os:cmd("ip netns pids " ++ Ns ++ " | xargs -r kill -9"),
                          _ = ip(["netns", "del", Ns])
                  end, Ours).

ns(#{network := {netns, Base}}, br) -> Base ++ "_br";
ns(#{network := {netns, Base}}, I) -> Base ++ "_" ++ integer_to_list(I).

%% @doc The IP address node `I' has with `network => netns' (and the host part of its name),
%% known before it starts: for what must name it beforehand, such as its TLS certificate.
-spec netns_address(id()) -> string().
netns_address(I) -> address(I).

address(I) -> "10.77.0." ++ integer_to_list(I).

ip(Args) ->
    case os:find_executable("ip") of
        false -> {error, no_ip};
        Ip ->
            Port = open_port({spawn_executable, Ip}, [{args, Args}, exit_status, stderr_to_stdout,
                                                     binary]),
            ip_result(Port, <<>>)
    end.

ip_result(Port, Out) ->
    receive
        {Port, {data, D}} -> ip_result(Port, <<Out/binary, D/binary>>);
        {Port, {exit_status, 0}} -> ok;
        {Port, {exit_status, _}} -> {error, Out}
    end.

%%% ------------------------------------------------------------- logs

%% @doc A logger filter for the nodes of a cluster that is cut on purpose: drops the reports a
%% partition is expected to cause (refused connections, Mnesia's `inconsistent_database'),
%% and those naming any of `Extra' (strings); passes everything else.
-spec netsplit_filter(logger:log_event(), [string()]) -> logger:filter_return().
netsplit_filter(Event = #{msg := Msg}, Extra) ->
    Text = try
               case Msg of
                   {string, S} -> S;
                   {report, R} -> io_lib:format("~0p", [R]);
                   {F, A} -> io_lib:format(F, A)
               end
           catch _:_ -> ""
           end,
    Patterns = ["inconsistent_database", "Connection attempt from node" | Extra],
    case [P || P <- Patterns, string:find(Text, P) =/= nomatch] of
        [] -> Event;
        _ -> stop
    end.
