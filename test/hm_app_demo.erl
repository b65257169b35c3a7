%% @doc An application that depends on hypermnesia (its .app lists it in `applications') and
%% keeps its data on disc, started on peer nodes by test/hm_app_SUITE.erl: the starting order
%% docs/guide/09-in-your-application.md describes. By the time start/2 runs,
%% hypermnesia runs and Mnesia does not, so the disc schema can still be created. A node
%% started with Mnesia's `extra_db_nodes' joins that cluster instead: it starts Mnesia (which
%% fetches the schema from there), keeps its schema on disc and adds its own copy of the
%% table. Every step may have been done by an earlier start of the node.
-module(hm_app_demo).
-behaviour(application).
-behaviour(supervisor).
-export([start/2, stop/1, init/1, write/2, read/1]).

start(_Type, _Args) ->
    %% Loaded (not started) so that its environment, `-mnesia ...' flags included, is read.
    _ = application:load(mnesia),
    ok = case application:get_env(mnesia, extra_db_nodes, []) of
             [] -> first_node();
             [_ | _] -> join()
         end,
    supervisor:start_link(?MODULE, []).

first_node() ->
    ok = case mnesia:create_schema([node()]) of
             ok -> ok;
             {error, {_, {already_exists, _}}} -> ok
         end,
    ok = mnesia:start(),
    ok = mnesia:wait_for_tables(mnesia:system_info(local_tables), 30000),
    case hypermnesia:create_table(demo, [{type, pawset}, {attributes, [k, v]},
                                         {disc_copies, [node()]}]) of
        {atomic, ok} -> ok;
        {aborted, {already_exists, demo}} -> ok
    end.

join() ->
    ok = mnesia:start(),
    ok = case mnesia:change_table_copy_type(schema, node(), disc_copies) of
             {atomic, ok} -> ok;
             {aborted, {already_exists, schema, _, disc_copies}} -> ok
         end,
    case hypermnesia:add_table_copy(demo, node(), disc_copies) of
        {atomic, ok} -> ok;
        {aborted, {already_exists, demo, _}} -> ok
    end.

stop(_State) -> ok.

init([]) -> {ok, {#{}, []}}.

write(K, V) -> hypermnesia:async_ec(fun() -> mnesia:write({demo, K, V}) end).

read(K) -> hypermnesia:async_ec(fun() -> mnesia:read(demo, K) end).
