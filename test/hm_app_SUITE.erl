%% @doc Hypermnesia as a dependency of another application, on real nodes: an application
%% that lists `hypermnesia' in its `applications' is started with
%% `application:ensure_all_started/1' on a node with no schema yet. Starting hypermnesia
%% must not start Mnesia, so the application can still create a disc schema, start Mnesia
%% and create a `disc_copies' EC table; after a restart of the node the same start finds the
%% schema and the table on disc, with the row written before. A second node started with
%% Mnesia's `extra_db_nodes' joins the first one's cluster through the same application and
%% gets its own disc copy, which converges with the first. A Mnesia without the internals EC
%% tables rely on is refused at start, with an error that names what differs.
-module(hm_app_SUITE).
-include_lib("common_test/include/ct.hrl").
-include_lib("stdlib/include/assert.hrl").

-export([suite/0, all/0, init_per_testcase/2, end_per_testcase/2]).
-export([disc_schema_then_dependent_app/1, join_with_extra_db_nodes/1,
         start_refused_on_unsupported_mnesia/1, config_file_starts_mnesia/1]).

% A hung case fails within minutes, not after Common Test's default half hour.
suite() -> [{timetrap, {minutes, 3}}].

all() -> [disc_schema_then_dependent_app, join_with_extra_db_nodes,
          start_refused_on_unsupported_mnesia, config_file_starts_mnesia].

%% The application's .app in an ebin directory of the test case's own (its module,
%% test/hm_app_demo.erl, is compiled with the tests).
init_per_testcase(Case, Config) ->
    Dir = filename:join(?config(priv_dir, Config), Case),
    Ebin = filename:join(Dir, "ebin"),
    ok = filelib:ensure_dir(filename:join(Ebin, "x")),
    App = {application, hm_app_demo,
           [{description, "an application that depends on hypermnesia"}, {vsn, "1"},
            {modules, [hm_app_demo]}, {registered, []},
            {applications, [kernel, stdlib, hypermnesia]}, {mod, {hm_app_demo, []}}]},
    ok = file:write_file(filename:join(Ebin, "hm_app_demo.app"), io_lib:format("~p.~n", [App])),
    _ = os:cmd("epmd -daemon"),
    [{case_dir, Dir}, {peers, ets:new(peers, [public])} | Config].

end_per_testcase(_Case, Config) ->
    [try peer:stop(P) catch exit:_ -> ok end || {P} <- ets:tab2list(?config(peers, Config))],
    ok.

disc_schema_then_dependent_app(Config) ->
    P1 = boot(Config, 1, []),
    ?assertEqual(no, peer:call(P1, mnesia, system_info, [is_running])),
    {ok, Started} = peer:call(P1, application, ensure_all_started, [hm_app_demo], 60000),
    %% Hypermnesia (and crypto, which it needs) started, Mnesia not: the app started it
    ?assertEqual([hypermnesia, hm_app_demo], Started -- [crypto]),
    ?assertNot(lists:member(mnesia, Started)),
    ?assertEqual(disc_copies, peer:call(P1, mnesia, table_info, [schema, storage_type])),
    ?assertMatch({ok, #{type := pawset}}, peer:call(P1, hypermnesia, ec_options, [demo])),
    ok = peer:call(P1, hm_app_demo, write, [1, one]),
    ?assertEqual([{demo, 1, one}], peer:call(P1, hm_app_demo, read, [1])),
    stopped = peer:call(P1, mnesia, stop, []),
    ok = peer:stop(P1),

    %% The same start on the same directory: schema and table come from disc.
    P2 = boot(Config, 1, []),
    {ok, _} = peer:call(P2, application, ensure_all_started, [hm_app_demo], 60000),
    ?assertEqual(disc_copies, peer:call(P2, mnesia, table_info, [schema, storage_type])),
    ok = hm_cluster:wait_until(fun() -> peer:call(P2, hm_app_demo, read, [1]) =:=
                                            [{demo, 1, one}] end, 30000),
    ok = peer:call(P2, hm_app_demo, write, [2, two]),
    ?assertEqual([{demo, 2, two}], peer:call(P2, hm_app_demo, read, [2])).

join_with_extra_db_nodes(Config) ->
    P1 = boot(Config, 1, []),
    {ok, _} = peer:call(P1, application, ensure_all_started, [hm_app_demo], 60000),
    ok = peer:call(P1, hm_app_demo, write, [1, one]),
    N1 = peer:call(P1, erlang, node, []),

    P2 = boot(Config, 2, ["-mnesia", "extra_db_nodes", "['" ++ atom_to_list(N1) ++ "']"]),
    {ok, _} = peer:call(P2, application, ensure_all_started, [hm_app_demo], 60000),
    N2 = peer:call(P2, erlang, node, []),
    ?assertEqual(disc_copies, peer:call(P2, mnesia, table_info, [schema, storage_type])),
    ?assertEqual(lists:sort([N1, N2]),
                 lists:sort(peer:call(P1, mnesia, table_info, [demo, disc_copies]))),
    %% The new copy caught up, and writes flow both ways.
    ok = hm_cluster:wait_until(fun() -> peer:call(P2, hm_app_demo, read, [1]) =:=
                                            [{demo, 1, one}] end, 30000),
    ok = peer:call(P2, hm_app_demo, write, [2, two]),
    ok = hm_cluster:wait_until(fun() -> peer:call(P1, hm_app_demo, read, [2]) =:=
                                            [{demo, 2, two}] end, 30000).

%% A Mnesia whose state has another shape than the one the refusal of transactions relies
%% on (here: a lock-target entry changed by hand, as a future Mnesia might store it): both
%% `hypermnesia:start/0' and the application's own start refuse, naming the entry and the
%% Mnesia version; with the entry restored, the same start succeeds.
start_refused_on_unsupported_mnesia(Config) ->
    P = boot(Config, 1, []),
    ok = peer:call(P, mnesia, start, []),
    Key = {schema, where_to_wlock},
    [{Key, Good}] = peer:call(P, ets, lookup, [mnesia_gvar, Key]),
    true = peer:call(P, ets, insert, [mnesia_gvar, {Key, [node_list_only]}]),
    {ok, Vsn} = peer:call(P, application, get_key, [mnesia, vsn]),
    What = {gvar, Key, [node_list_only]},
    ?assertEqual({error, {unsupported_mnesia, Vsn, What}}, peer:call(P, hypermnesia, start, [])),
    ?assertMatch({error, {hypermnesia, {{unsupported_mnesia, Vsn, What}, _}}},
                 peer:call(P, application, ensure_all_started, [hypermnesia])),
    ?assertEqual(false, lists:keymember(hypermnesia, 1,
                                        peer:call(P, application, which_applications, []))),
    true = peer:call(P, ets, insert, [mnesia_gvar, {Key, Good}]),
    ?assertEqual(ok, peer:call(P, hypermnesia, start, [])).

%% `hypermnesia:start(File)' on a node whose Mnesia is not running starts it, then
%% Hypermnesia, and creates the file's tables; started again from the same file, it finds
%% them there.
config_file_starts_mnesia(Config) ->
    P = boot(Config, 1, []),
    Node = peer:call(P, erlang, node, []),
    no = peer:call(P, mnesia, system_info, [is_running]),
    File = filename:join(?config(case_dir, Config), "cluster.config"),
    ok = file:write_file(File, [io_lib:format("~p.~n", [T])
                                || T <- [{nodes, [Node]}, {crdt_tables, [{cfg_likes, gcounter}]}]]),
    ?assertEqual(ok, peer:call(P, hypermnesia, start, [File])),
    yes = peer:call(P, mnesia, system_info, [is_running]),
    ok = peer:call(P, hypermnesia, increment, [cfg_likes, home]),
    ?assertEqual(1, peer:call(P, hypermnesia, value, [cfg_likes, home])),
    %% a second start from the same file finds everything there
    ?assertEqual(ok, peer:call(P, hypermnesia, start, [File])).

%% Node `I' of the test case (named pkg_app<I>_<os pid>), with its own Mnesia directory,
%% which a later boot of the same `I' finds again.
boot(Config, I, Args) ->
    Dir = ?config(case_dir, Config),
    Name = list_to_atom(lists:concat(["pkg_app", I, "_", os:getpid()])),
    {ok, P, _} = peer:start(#{name => Name, connection => standard_io,
                              args => ["-pa", filename:dirname(code:which(hypermnesia)),
                                       "-pa", filename:dirname(code:which(hm_app_demo)),
                                       "-pa", filename:join(Dir, "ebin"),
                                       "-mnesia", "dir",
                                       "\"" ++ filename:join(Dir, Name) ++ "\"" | Args]}),
    true = ets:insert(?config(peers, Config), {P}),
    P.
