%% @doc Operating a cluster, on three real nodes (OTP `peer', the shared harness
%% {@link hm_cluster}) with real partitions: the cluster-wide status
%% (`hypermnesia:cluster_info/0,2', bounded when members are down), the events (subscribed to
%% and logged with `domain => [hypermnesia]'), `mnesia:subscribe/1' on an EC table, the
%% `hmctl' escript, and the HTTP status page: its JSON with `httpc', and the page itself in
%% headless Chromium during a partition and after the heal (skipped when Chromium is not
%% installed: `make status-page-test' installs it).
%%
%% Each node runs a collector process (registered `ops_collector') that subscribes to every
%% event, to Mnesia's table events of the test table, and receives the hypermnesia-domain
%% log events of a logger handler (this module); cases read what it collected.
-module(hm_ops_SUITE).
-include_lib("common_test/include/ct.hrl").
-include_lib("eunit/include/eunit.hrl").

-export([suite/0, all/0, init_per_suite/1, end_per_suite/1, init_per_testcase/2, end_per_testcase/2]).
-export([cluster_info_converged/1, cluster_info_bounded/1, partition_events_and_heal/1,
         mnesia_subscribe/1, status_json/1, cli/1, status_page_in_browser/1,
         status_page_started_and_stopped_at_run_time/1, wire_versions_negotiated/1]).
-export([start_collector/0, collected/0, log/2, prometheus_metrics/1]).

-define(TAB, ops_t).
-define(TOKEN, <<"ops-test-token">>).
-define(WAIT_MS, 30000).

% A hung case fails within minutes, not after Common Test's default half hour.
suite() -> [{timetrap, {minutes, 3}}].

all() -> [cluster_info_converged, cluster_info_bounded, partition_events_and_heal,
          mnesia_subscribe, status_json, prometheus_metrics, cli,
          status_page_started_and_stopped_at_run_time, wire_versions_negotiated,
          status_page_in_browser].

%%% ------------------------------------------------------------- cluster

init_per_suite(Config) ->
    C = hm_cluster:start(#{nodes => 3, dir => ?config(priv_dir, Config), prefix => "ops_n",
                           modules => [?MODULE],
                           app_env => [{max_backoff_ms, 500},
                                       {http_status, #{port => 0, token => ?TOKEN}}],
                           log_filter => {ops_netsplit, {fun hm_cluster:netsplit_filter/2, []}}}),
    Nodes = hm_cluster:nodes(C),
    {atomic, ok} = hm_cluster:call(C, 1, hypermnesia, create_table,
                                   [?TAB, [{type, pawset}, {attributes, [id, val]},
                                           {ram_copies, Nodes}]]),
    ok = hm_cluster:call(C, 1, hypermnesia, wait_converged, [?WAIT_MS], ?WAIT_MS + 5000),
    [ok = hm_cluster:call(C, I, ?MODULE, start_collector, []) || I <- [1, 2, 3]],
    [{cluster, C} | Config].

end_per_suite(Config) ->
    hm_cluster:stop(?config(cluster, Config)).

init_per_testcase(_Case, Config) -> Config.

end_per_testcase(_Case, Config) ->
    ok = hm_cluster:heal(?config(cluster, Config)).

call(Config, I, M, F, A) -> hm_cluster:call(?config(cluster, Config), I, M, F, A).

node_n(Config, I) -> hm_cluster:node(?config(cluster, Config), I).

write(Config, I, Key, Val) ->
    ok = call(Config, I, hypermnesia, async_ec, [fun() -> mnesia:write({?TAB, Key, Val}) end]).

wait_until(F) -> hm_cluster:wait_until(F, ?WAIT_MS).

wait_converged(Config) ->
    ok = hm_cluster:call(?config(cluster, Config), 1, hypermnesia, wait_converged, [?WAIT_MS],
                         ?WAIT_MS + 5000).

%%% ------------------------------------------------------------- collector (runs on the nodes)

%% A process that keeps every message it gets: events, Mnesia table events, log events.
start_collector() ->
    Self = self(),
    Pid = spawn(fun() ->
                        register(ops_collector, self()),
                        ok = hypermnesia:subscribe(all),
                        {ok, _} = mnesia:subscribe({table, ?TAB, simple}),
                        Self ! {collector, self()},
                        collect([])
                end),
    receive {collector, Pid} -> ok after 10000 -> error(no_collector) end,
    ok = logger:add_handler(ops_capture, ?MODULE, #{level => all}).

collect(Acc) ->
    receive
        {ops_get, From, Ref} -> From ! {Ref, lists:reverse(Acc)}, collect(Acc);
        M -> collect([M | Acc])
    end.

collected() ->
    Ref = make_ref(),
    ops_collector ! {ops_get, self(), Ref},
    receive {Ref, L} -> L after 10000 -> error(no_collector) end.

%% logger handler: hypermnesia-domain events to the collector.
log(Event = #{meta := #{domain := [hypermnesia | _]}}, _Config) ->
    case whereis(ops_collector) of
        undefined -> ok;
        Pid -> Pid ! {log, Event}, ok
    end;
log(_, _) -> ok.

events(Config, I) -> call(Config, I, ?MODULE, collected, []).

%% The Info of every `Event' node I published so far.
events(Config, I, Event) -> [Info || {hypermnesia_event, E, Info} <- events(Config, I), E =:= Event].

%%% ------------------------------------------------------------- cases

%% Writes on every node; once converged, every copy has the same digest and vector, lag 0.
cluster_info_converged(Config) ->
    [N1, N2, N3] = Nodes = [node_n(Config, I) || I <- [1, 2, 3]],
    [write(Config, I, I, {from, I}) || I <- [1, 2, 3]],
    wait_converged(Config),
    #{converged := true, nodes := Ns, tables := #{?TAB := T}} =
        call(Config, 2, hypermnesia, cluster_info, []),
    ?assertEqual(Nodes, lists:sort(maps:keys(Ns))),
    [#{status := up, connected := _, mnesia := yes} = maps:get(N, Ns) || N <- Nodes],
    #{converged := true, pending := [], members := Nodes, copies := Cs} = T,
    [#{digest := D, delivered := V, lag := 0, status := ready, size := 3}] =
        lists:usort([maps:with([digest, delivered, lag, status, size], C)
                     || C <- maps:values(Cs)]),
    ?assertEqual(32, byte_size(D)),
    ?assertEqual(3, length([N || N <- [N1, N2, N3], maps:is_key(N, Cs)])),
    ?assert(map_size(V) >= 3),
    %% one table asked for; bad input gets a clear error
    #{tables := Only} = call(Config, 1, hypermnesia, cluster_info, [?TAB]),
    ?assertEqual([?TAB], maps:keys(Only)),
    {error, {not_ec_table, nope}} = call(Config, 1, hypermnesia, cluster_info, [nope]),
    {error, {bad_option, {timeout, 0}}} =
        call(Config, 1, hypermnesia, cluster_info, [all, #{timeout => 0}]),
    {error, {bad_event, nope}} = call(Config, 1, hypermnesia, subscribe, [nope]).

%% A copy whose process does not answer is reported as such, and the call returns (the
%% process stays suspended: without a bound the call would never return; the margin on the
%% time only absorbs a loaded machine).
cluster_info_bounded(Config) ->
    N2 = node_n(Config, 2),
    Name = hm_ec_table_server:name(?TAB),
    ok = call(Config, 2, sys, suspend, [Name]),
    try
        {Took, Info} = timed_cluster_info(Config, 1, 1000),
        ct:log("took ~p ms: ~p", [Took, Info]),
        ?assert(Took < 10000),
        #{converged := false, tables := #{?TAB := #{converged := false, pending := P,
                                                    copies := #{N2 := #{status := timeout}}}}} = Info,
        ?assert(lists:member({N2, timeout}, P))
    after
        ok = call(Config, 2, sys, resume, [Name])
    end,
    wait_converged(Config).

%% cluster_info on node I, and how long it took there, in ms.
timed_cluster_info(Config, I, Timeout) ->
    {Us, Info} = call(Config, I, timer, tc, [hypermnesia, cluster_info, [all, #{timeout => Timeout}]]),
    {Us div 1000, Info}.

%% A real partition: it is seen (event, status), both sides write, the cluster is not
%% converged and says which member is unreachable, within a bounded time; after the heal it
%% converges and the reconnect, the Mnesia re-join and the catch-up are reported and logged.
partition_events_and_heal(Config) ->
    C = ?config(cluster, Config),
    [N1, N2, N3] = [node_n(Config, I) || I <- [1, 2, 3]],
    ok = hm_cluster:cut(C, [1, 2], [3]),
    wait_until(fun() -> [P || #{peer := P} <- events(Config, 1, partition), P =:= N3] =/= [] end),
    wait_until(fun() -> [P || #{peer := P} <- events(Config, 3, partition), P =:= N1] =/= [] end),
    [write(Config, 1, K, side12) || K <- lists:seq(101, 105)],
    [write(Config, 3, K, side3) || K <- lists:seq(111, 115)],
    {Took, Info} = timed_cluster_info(Config, 1, 2000),
    ?assert(Took < 10000),
    ct:log("during the partition: ~p", [Info]),
    #{converged := false, nodes := #{N3 := #{status := Down3}, N2 := #{status := up}},
      tables := #{?TAB := #{converged := false, copies := #{N3 := #{status := Down3}}}}} = Info,
    ?assert(lists:member(Down3, [unreachable, timeout])),
    #{nodes := #{N1 := #{partitions_seen := Seen}}} = Info,
    ?assert(Seen >= 1),
    %% the JSON says so too
    {200, Json} = get_json(Config, 1),
    ?assertMatch(<<"{\"converged\":false,", _/binary>>, Json),
    %% the command-line tool waits in vain and says why
    {1, Out} = hmctl(Config, 1, ["wait-converged", "--timeout", "1"]),
    ?assertNotEqual(nomatch, string:find(Out, "NOT converged")),

    ok = hm_cluster:heal(C),
    wait_converged(Config),
    #{converged := true} = call(Config, 3, hypermnesia, cluster_info, []),
    %% events, on the nodes that saw them
    wait_until(fun() -> [P || #{peer := P} <- events(Config, 1, reconnect), P =:= N3] =/= [] end),
    wait_until(fun() -> lists:any(fun(I) -> events(Config, I, mnesia_rejoin) =/= [] end,
                                  [1, 2, 3]) end),
    %% node 3 received the other side's 5 writes during its catch-ups
    wait_until(fun() ->
                       Ups = [I || I = #{table := ?TAB, peer := P} <- events(Config, 3, catch_up),
                                   lists:member(P, [N1, N2])],
                       Ups =/= [] andalso
                           lists:sum([R || #{ops_received := R} <- Ups]) >= 5
               end),
    [#{duration_ms := D, ops_sent := S} | _] = events(Config, 3, catch_up),
    ?assert(is_integer(D) andalso D >= 0 andalso is_integer(S)),
    %% cluster_info reports the last heal (once node 3 has recorded it)
    wait_until(fun() ->
                       #{nodes := Ns1} = call(Config, 3, hypermnesia, cluster_info, []),
                       case maps:get(N3, Ns1) of
                           #{last_heal := #{table := ?TAB, peer := _, duration_ms := _,
                                            ops_received := _, time := _}} -> true;
                           _ -> false
                       end
               end),
    %% logged with the hypermnesia domain, as a structured report
    Logged = [E || {log, #{msg := {report, #{hypermnesia_event := E}}}} <- events(Config, 3)],
    ?assert(lists:member(partition, Logged)),
    ?assert(lists:member(catch_up, Logged)).

%% mnesia:subscribe on an EC table: each node sees the changes to what its reads show,
%% local or from another node.
mnesia_subscribe(Config) ->
    write(Config, 1, 200, first),
    wait_until(fun() -> has(Config, 2, {write, {?TAB, 200, first}}) end),
    ?assert(has(Config, 1, {write, {?TAB, 200, first}})),
    ok = call(Config, 3, hypermnesia, async_ec, [fun() -> mnesia:delete({?TAB, 200}) end]),
    wait_until(fun() -> has(Config, 2, {delete, {?TAB, 200}}) end),
    wait_until(fun() -> has(Config, 1, {delete, {?TAB, 200}}) end).

has(Config, I, What) ->
    lists:any(fun({mnesia_table_event, E}) -> element(1, E) =:= element(1, What) andalso
                                                  element(2, E) =:= element(2, What);
                 (_) -> false
              end, events(Config, I)).

%% The JSON of the status page: token required, loopback only.
status_json(Config) ->
    wait_converged(Config),
    {200, Json} = get_json(Config, 2),
    ?assertMatch(<<"{\"converged\":true,", _/binary>>, Json),
    [?assertNotEqual(nomatch, binary:match(Json, atom_to_binary(node_n(Config, I))))
     || I <- [1, 2, 3]],
    ?assertNotEqual(nomatch, binary:match(Json, <<"\"ops_t\":{\"converged\":true">>)),
    {ok, Url} = call(Config, 2, hypermnesia, http_status_url, []),
    ?assertMatch("http://127.0.0.1:" ++ _, Url),
    {401, _} = http_get(Url ++ "?format=json", []),
    {401, _} = http_get(Url ++ "?format=json&token=wrong", []),
    {200, Page} = http_get(Url ++ "?token=" ++ binary_to_list(?TOKEN), []),
    ?assertNotEqual(nomatch, binary:match(Page, <<"<script>">>)),
    ?assertEqual(nomatch, binary:match(Page, <<"src=">>)),     % nothing fetched elsewhere
    {200, <<"{", _/binary>>} =
        http_get(Url, [{"authorization", "Bearer " ++ binary_to_list(?TOKEN)},
                       {"accept", "application/json"}]),
    {404, _} = http_get(lists:flatten(string:replace(Url, "/status", "/other")) ++
                            "?token=" ++ binary_to_list(?TOKEN), []),
    %% bound to loopback
    [{127, 0, 0, 1}] =
        hm_cluster:eval(?config(cluster, Config), 2,
                        fun() -> [proplists:get_value(bind_address, I)
                                  || {httpd, _, I} <- inets:services_info()]
                        end).

%% GET /metrics: behind the token, Prometheus' text format, this node's copies and its view of
%% every member's (converged, lag 0 once converged).
prometheus_metrics(Config) ->
    wait_converged(Config),
    {ok, Status} = call(Config, 2, hypermnesia, http_status_url, []),
    Url = lists:flatten(string:replace(Status, "/status", "/metrics")),
    {401, _} = http_get(Url, []),
    {401, _} = http_get(Url ++ "?token=wrong", []),
    {200, Body} = http_get(Url, [{"authorization", "Bearer " ++ binary_to_list(?TOKEN)}]),
    Lines = string:split(unicode:characters_to_list(Body), "\n", all),
    N2 = atom_to_list(node_n(Config, 2)),
    Labels = "{node=\"" ++ N2 ++ "\",table=\"" ++ atom_to_list(?TAB) ++ "\"}",
    Has = fun(Prefix) -> [L || L <- Lines, string:prefix(L, Prefix) =/= nomatch] =/= [] end,
    ?assert(Has("# TYPE hypermnesia_table_unstable_ops gauge")),
    ?assert(Has("hypermnesia_table_ready" ++ Labels ++ " 1")),
    ?assert(Has("hypermnesia_table_converged" ++ Labels ++ " 1")),
    ?assert(Has("hypermnesia_members{node=\"" ++ N2 ++ "\"} 3")),
    [?assert(Has("hypermnesia_table_lag{member=\"" ++ atom_to_list(node_n(Config, I))
                 ++ "\",node=\"" ++ N2 ++ "\",table=\"" ++ atom_to_list(?TAB) ++ "\"} 0"))
     || I <- [1, 2, 3]].

get_json(Config, I) ->
    {ok, Url} = call(Config, I, hypermnesia, http_status_url, []),
    http_get(Url ++ "?format=json&token=" ++ binary_to_list(?TOKEN), []).

http_get(Url, Headers) ->
    {ok, _} = application:ensure_all_started(inets),
    {ok, {{_, Code, _}, _, Body}} =
        httpc:request(get, {Url, Headers}, [{timeout, 15000}], [{body_format, binary}]),
    {Code, Body}.

%% The page stopped and started again on a running node, with the configured settings and
%% with new ones: its port closes and opens, the token is the one in force, and what the
%% node knows of its last partition and heal is the same before and after.
status_page_started_and_stopped_at_run_time(Config) ->
    C = ?config(cluster, Config),
    Cut = erlang:system_time(millisecond),
    ok = hm_cluster:cut(C, [3], [1, 2]),
    write(Config, 1, runtime_page, 1),
    ok = hm_cluster:heal(C),
    wait_converged(Config),
    N3 = node_n(Config, 3),
    View = fun() -> call(Config, 3, hypermnesia, cluster_info, [?TAB, #{timeout => 2000}]) end,
    Kept = fun() ->
                   #{nodes := #{N3 := V}} = View(),
                   {maps:with([partitions_seen, last_partition, mnesia_rejoins], V),
                    maps:get(last_heal, V)}
           end,
    %% node 3's copy has finished its catch-ups of this heal: its last heal is recorded
    wait_until(fun() ->
                       #{nodes := #{N3 := #{last_heal := #{time := T}}},
                         tables := #{?TAB := #{copies := #{N3 := #{catching_up := []}}}}} =
                           View(),
                       T >= Cut
               end),
    Before = {#{last_partition := #{}}, #{}} = Kept(),
    Page = fun() -> {ok, U} = call(Config, 3, hypermnesia, http_status_url, []), U end,
    Url = Page(),
    {error, already_started} = call(Config, 3, hypermnesia, start_status_page, []),
    ok = call(Config, 3, hypermnesia, stop_status_page, []),
    {error, not_enabled} = call(Config, 3, hypermnesia, http_status_url, []),
    {error, _} = httpc:request(get, {Url, []}, [{timeout, 5000}], []),
    ok = call(Config, 3, hypermnesia, stop_status_page, []),
    %% a bad setting starts nothing and leaves the configured one
    {error, {bad_http_status, no_token}} =
        call(Config, 3, hypermnesia, start_status_page, [#{port => 0}]),
    {ok, Again} = call(Config, 3, hypermnesia, start_status_page, []),
    {200, _} = http_get(Again ++ "?format=json&token=" ++ binary_to_list(?TOKEN), []),
    %% new settings, in force at once
    ok = call(Config, 3, hypermnesia, stop_status_page, []),
    New = "runtime-token-42",
    {ok, Url2} = call(Config, 3, hypermnesia, start_status_page,
                      [#{port => 0, token => list_to_binary(New)}]),
    Url2 = Page(),
    {401, _} = http_get(Url2 ++ "?format=json&token=" ++ binary_to_list(?TOKEN), []),
    {200, <<"{", _/binary>>} = http_get(Url2 ++ "?format=json&token=" ++ New, []),
    %% back to the suite's settings
    ok = call(Config, 3, hypermnesia, stop_status_page, []),
    {ok, _} = call(Config, 3, hypermnesia, start_status_page,
                   [#{port => 0, token => ?TOKEN}]),
    {200, _} = get_json(Config, 3),
    Before = Kept().

%% Each node asked the others which wire versions they read, and sends at the newest all
%% of them read: here, nodes of one release, its own.
wire_versions_negotiated(Config) ->
    Versions = {_, Newest} = hm_ec_wire:versions(),
    Nodes = hm_cluster:nodes(?config(cluster, Config)),
    [wait_until(fun() ->
                        call(Config, I, hm_ec_versions, known, []) =:=
                            [{N, Versions} || N <- Nodes, N =/= node_n(Config, I)]
                end) || I <- [1, 2, 3]],
    [Newest = call(Config, I, hm_ec_wire, sending_version, []) || I <- [1, 2, 3]],
    ok.

%% The escript against a running node.
cli(Config) ->
    wait_converged(Config),
    N1 = atom_to_list(node_n(Config, 1)),
    {0, Status} = hmctl(Config, 1, ["status"]),
    ?assertNotEqual(nomatch, string:find(Status, "cluster: converged")),
    [?assertNotEqual(nomatch, string:find(Status, atom_to_list(node_n(Config, I))))
     || I <- [1, 2, 3]],
    {0, Members} = hmctl(Config, 1, ["members"]),
    ?assertNotEqual(nomatch, string:find(Members, N1 ++ " ")),
    {0, Tables} = hmctl(Config, 1, ["tables"]),
    ?assertNotEqual(nomatch, string:find(Tables, "ops_t: converged")),
    {0, Json} = hmctl(Config, 1, ["--json", "status"]),
    ?assertMatch("{\"converged\":true," ++ _, Json),
    {0, Waited} = hmctl(Config, 1, ["wait-converged", "--timeout", "20"]),
    ?assertEqual("converged\n", Waited),
    {0, "{\"converged\":true}\n"} = hmctl(Config, 1, ["--json", "wait-converged"]),
    %% `-sname name' without a host, as `erl -sname name' takes it: this host
    [Name1, _] = string:split(N1, "@"),
    Cookie1 = atom_to_list(call(Config, 1, erlang, get_cookie, [])),
    {0, Short} = run_escript(Config, ["-sname", Name1, "-setcookie", Cookie1, "status"]),
    ?assertNotEqual(nomatch, string:find(Short, "cluster: converged")),
    %% errors
    {2, Usage} = run_escript(Config, []),
    ?assertNotEqual(nomatch, string:find(Usage, "usage:")),
    {2, _} = run_escript(Config, ["-sname", N1, "frobnicate"]),
    [_, Host] = string:split(N1, "@"),
    {3, Gone} = run_escript(Config, ["-sname", "ops_nobody@" ++ Host, "status"]),
    ?assertNotEqual(nomatch, string:find(Gone, "cannot reach")),
    {3, _} = run_escript(Config, ["-sname", N1, "-setcookie", "wrong_cookie", "status"]),
    %% a node that runs without Hypermnesia
    Cookie = atom_to_list(call(Config, 1, erlang, get_cookie, [])),
    {ok, Bare, BareNode} = peer:start(#{name => list_to_atom("ops_bare_" ++ os:getpid()),
                                        connection => standard_io,
                                        args => ["-setcookie", Cookie]}),
    try
        {4, NotHere} = run_escript(Config, ["-sname", atom_to_list(BareNode), "-setcookie", Cookie,
                                            "status"]),
        ?assertNotEqual(nomatch, string:find(NotHere, "not loaded"))
    after
        peer:stop(Bare)
    end.

hmctl(Config, I, Args) ->
    Cookie = atom_to_list(call(Config, I, erlang, get_cookie, [])),
    run_escript(Config, ["-sname", atom_to_list(node_n(Config, I)), "-setcookie", Cookie | Args]).

run_escript(Config, Args) ->
    Escript = escript(Config),
    Port = open_port({spawn_executable, Escript},
                     [{args, Args}, exit_status, stderr_to_stdout, binary]),
    read_port(Port, []).

read_port(Port, Acc) ->
    receive
        {Port, {data, D}} -> read_port(Port, [D | Acc]);
        {Port, {exit_status, Code}} ->
            Out = binary_to_list(iolist_to_binary(lists:reverse(Acc))),
            ct:log("hmctl exit ~p:~n~s", [Code, Out]),
            {Code, Out}
    after 60000 -> error(hmctl_hangs)
    end.

%% Built once per run, by the script `make cli' runs, from this run's beams.
escript(Config) ->
    Out = filename:join(?config(priv_dir, Config), "hmctl"),
    case filelib:is_regular(Out) of
        true -> Out;
        false ->
            Src = proplists:get_value(source, hm_ctl:module_info(compile)),
            Root = filename:dirname(filename:dirname(filename:dirname(Src))),
            Ebin = filename:dirname(code:which(hm_ctl)),
            Log = os:cmd(filename:join([Root, "scripts", "build-hmctl"]) ++ " " ++ Ebin ++ " "
                         ++ Out ++ " 2>&1"),
            ct:log("build-hmctl: ~s", [Log]),
            true = filelib:is_regular(Out),
            Out
    end.

%% The page in headless Chromium: during a partition it shows the cluster not converged and
%% the cut links down; after the heal, converged and every link up.
status_page_in_browser(Config) ->
    case os:find_executable("chromium") of
        false -> {skip, "chromium is not installed (make status-page-test installs it)"};
        Chromium -> browse(Config, Chromium)
    end.

browse(Config, Chromium) ->
    C = ?config(cluster, Config),
    [N1, N2, N3] = [atom_to_list(node_n(Config, I)) || I <- [1, 2, 3]],
    {ok, Url0} = call(Config, 1, hypermnesia, http_status_url, []),
    Url = Url0 ++ "?token=" ++ binary_to_list(?TOKEN),
    wait_converged(Config),
    ok = hm_cluster:cut(C, [1, 2], [3]),
    Node3 = node_n(Config, 3),
    wait_until(fun() ->
                       #{nodes := #{Node3 := #{status := S}}} =
                           call(Config, 1, hypermnesia, cluster_info, [all, #{timeout => 2000}]),
                       S =/= up
               end),
    During = dump_dom(Config, Chromium, Url),
    ?assertNotEqual(nomatch, string:find(During, "class=\"no\">not converged</span>")),
    ?assertNotEqual(nomatch, string:find(During, link(N1, N3, "down"))),
    ?assertNotEqual(nomatch, string:find(During, link(N1, N2, "up"))),
    ?assertNotEqual(nomatch, string:find(During, "data-table=\"ops_t\">not converged")),
    ok = hm_cluster:heal(C),
    wait_converged(Config),
    After = dump_dom(Config, Chromium, Url),
    ?assertNotEqual(nomatch, string:find(After, "class=\"yes\">converged</span>")),
    ?assertNotEqual(nomatch, string:find(After, link(N1, N3, "up"))),
    ?assertNotEqual(nomatch, string:find(After, link(N3, N1, "up"))),
    ?assertNotEqual(nomatch, string:find(After, "data-table=\"ops_t\">converged")),
    %% without the token the page shows nothing of the cluster
    Refused = dump_dom(Config, Chromium, Url0),
    ?assertEqual(nomatch, string:find(Refused, N1)).

link(A, B, UpDown) ->
    "class=\"" ++ UpDown ++ "\" data-link=\"" ++ A ++ " " ++ B ++ "\">" ++ UpDown.

dump_dom(Config, Chromium, Url) ->
    Profile = filename:join(?config(priv_dir, Config), "chromium-profile"),
    Cmd = lists:flatten(
            io_lib:format("timeout 120 ~s --headless --no-sandbox --disable-gpu "
                          "--user-data-dir=~s --virtual-time-budget=5000 --dump-dom '~s' "
                          "2>/dev/null", [Chromium, Profile, Url])),
    Dom = os:cmd(Cmd),
    ct:log("~s~n~s", [Cmd, Dom]),
    Dom.
