%% @doc A cluster configuration in one file, read by `hypermnesia:start/1' (the ChiaVe
%% paper, *ChiaVe: A Flexible CRDT-Based Key-Value Store*, §3: one configuration file names
%% the nodes, the replication factor, the CRDT flavor and the broadcast epoch).
%%
%% The file holds Erlang terms (`file:consult/1'):
%% ```
%% {nodes, ['a@host', 'b@host', 'c@host']}.
%% {fragments, 16}.          % per table; 1: every node holds every key (default 1)
%% {replication, 3}.         % copies of each fragment (default: every node)
%% {storage, ram_copies}.    % or disc_copies (default ram_copies)
%% {flavor, delta}.          % op | state | delta (default op)
%% {epoch, 100}.             % ms, state and delta flavors (default 100)
%% {crdt_tables, [{likes, gcounter}, {carts, awset}]}.
%% '''
%% {@link start/1} starts Mnesia and Hypermnesia here, connects to the listed nodes that are
%% up, and creates every listed table that does not exist yet, over the listed nodes that
%% run Mnesia with this one: several nodes may start from the same file at once (one at a
%% time creates a table, under a global lock; the others find it there). {@link parse/1} and {@link table_options/2} are
%% the pure part.
%%
%% Invariants: a configuration is checked whole before anything starts; a bad one gives
%% `{error, {bad_config, Term}}' and changes nothing.
-module(hm_config).

-export([start/1, parse/1, table_options/2]).
-export_type([config/0]).

-type config() :: #{nodes := [node()], fragments := pos_integer(),
                    replication := pos_integer() | all, storage := ram_copies | disc_copies,
                    flavor := hm_crdt:flavor(), epoch := pos_integer(),
                    crdt_tables := [{atom(), hm_crdt:type()}]}.

-define(KEYS, [nodes, fragments, replication, storage, flavor, epoch, crdt_tables]).

%% @doc Read `File', start Mnesia (when it is not running) and Hypermnesia here, and create
%% the configured tables that do not exist yet. Errors: `{error, {config, File, Reason}}'
%% (the file cannot be read), `{error, {bad_config, Term}}', `{error, {extra_db_nodes,
%% Reason}}' (Mnesia could not join the listed nodes), `{error, {create_table, Tab,
%% Reason}}', and those of `hypermnesia:start/0'.
-spec start(file:filename()) -> ok | {error, term()}.
start(File) ->
    case file:consult(File) of
        {error, Reason} -> {error, {config, File, Reason}};
        {ok, Terms} ->
            case parse(Terms) of
                {error, _} = E -> E;
                {ok, Config} -> start_config(Config)
            end
    end.

start_config(Config = #{nodes := Nodes, crdt_tables := Tabs}) ->
    case hypermnesia:start() of
        ok ->
            _ = [net_adm:ping(N) || N <- Nodes, N =/= node()],
            case mnesia:change_config(extra_db_nodes, Nodes -- [node()]) of
                {ok, _} ->
                    Running = mnesia:system_info(running_db_nodes),
                    Pool = [N || N <- Nodes, lists:member(N, Running)],
                    create(Tabs, Config#{nodes := Pool});
                {error, Reason} -> {error, {extra_db_nodes, Reason}}
            end;
        {error, _} = E -> E
    end.

create([], _Config) -> ok;
create([{Tab, Type} | Rest], Config = #{nodes := Nodes}) ->
    %% one node at a time creates a table (a global lock over the pool): the others then
    %% find it there
    Create = fun() ->
                     lists:member(Tab, mnesia:system_info(tables)) orelse
                         hm_crdt_table:create_table(Tab, table_options(Type, Config))
             end,
    case global:trans({{?MODULE, Tab}, self()}, Create, lists:usort([node() | Nodes])) of
        true -> create(Rest, Config);
        {atomic, ok} -> create(Rest, Config);
        {aborted, {already_exists, Tab}} -> create(Rest, Config);    % made by another node
        {aborted, Reason} -> {error, {create_table, Tab, Reason}};
        aborted -> {error, {create_table, Tab, lock_not_taken}}
    end.

%% @doc Check a configuration's terms and fill in the defaults.
-spec parse([term()]) -> {ok, config()} | {error, {bad_config, term()}}.
parse(Terms) when is_list(Terms) ->
    Defaults = #{fragments => 1, replication => all, storage => ram_copies, flavor => op,
                 epoch => 100, crdt_tables => []},
    try
        Map = lists:foldl(fun(T = {K, V}, Acc) ->
                                  lists:member(K, ?KEYS) orelse throw(T),
                                  check(K, V) orelse throw(T),
                                  Acc#{K => V};
                             (T, _) -> throw(T)
                          end, Defaults, Terms),
        maps:is_key(nodes, Map) orelse throw(missing_nodes),
        case Map of
            #{replication := R, nodes := Ns} when is_integer(R), R > length(Ns) ->
                throw({replication, R});
            _ -> {ok, Map}
        end
    catch throw:Bad -> {error, {bad_config, Bad}}
    end;
parse(Other) -> {error, {bad_config, Other}}.

check(nodes, Ns) -> is_list(Ns) andalso Ns =/= [] andalso lists:all(fun is_atom/1, Ns);
check(fragments, F) -> is_integer(F) andalso F >= 1;
check(replication, R) -> R =:= all orelse (is_integer(R) andalso R >= 1);
check(storage, S) -> S =:= ram_copies orelse S =:= disc_copies;
check(flavor, F) -> lists:member(F, hm_crdt:flavors());
check(epoch, E) -> is_integer(E) andalso E >= 1;
check(crdt_tables, Ts) ->
    is_list(Ts) andalso lists:all(fun({Tab, Type}) -> is_atom(Tab) andalso
                                                          lists:member(Type, hm_crdt:types());
                                     (_) -> false
                                  end, Ts).

%% @doc The `hypermnesia:create_table/2' options of a CRDT table of `Type' under a
%% configuration: fully replicated over its nodes with one fragment and every node a copy,
%% otherwise partitioned over them.
-spec table_options(hm_crdt:type(), config()) -> [tuple()].
table_options(Type, #{nodes := Nodes, fragments := F, replication := R, storage := St,
                      flavor := Flavor, epoch := E}) ->
    N = case R of all -> length(Nodes); _ -> min(R, length(Nodes)) end,
    Copies = case {F, N =:= length(Nodes)} of
                 {1, true} -> [{St, Nodes}];
                 _ ->
                     NKey = case St of ram_copies -> n_ram_copies; disc_copies -> n_disc_copies end,
                     [{frag_properties, [{n_fragments, F}, {NKey, N}, {node_pool, Nodes}]}]
             end,
    [{crdt, Type}, {flavor, Flavor}, {epoch, E} | Copies].
