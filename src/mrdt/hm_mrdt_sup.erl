%% @doc Supervisor of the repository servers ({@link hm_mrdt_server}), one per repository
%% with a copy on this node: started for every such repository when the supervisor starts,
%% by {@link hm_session:create_repo/2} on every node of a new repository, and on first use.
-module(hm_mrdt_sup).
-behaviour(supervisor).

-export([start_link/0, init/1, ensure_server/1]).

-spec start_link() -> {ok, pid()} | {error, term()}.
start_link() ->
    case supervisor:start_link({local, ?MODULE}, ?MODULE, []) of
        {ok, Pid} ->
            %% every repository with a copy here gets its server (remote refresh, collection,
            %% and this node's branch record), whether or not sessions connect here
            _ = spawn(fun start_existing/0),
            {ok, Pid};
        Other -> Other
    end.

start_existing() ->
    Repos = [list_to_atom(R) || T <- catch_tables(),
                                "hm_mrdt_" ++ R <- [atom_to_list(T)], R =/= ""],
    _ = [ensure_server(R) || R <- Repos],
    ok.

catch_tables() ->
    try mnesia:system_info(local_tables)
    catch exit:_ -> []
    end.

-spec init([]) -> {ok, {supervisor:sup_flags(), [supervisor:child_spec()]}}.
init([]) ->
    %% the leaves and blobs unpacked from commit records, shared by the node's readers
    %% (hm_mrdt_store:fetch/1); owned here so that it outlives any one repository's server
    _ = hm_mrdt_store:new_unpacked(),
    {ok, {#{strategy => simple_one_for_one, intensity => 10, period => 10},
          [#{id => hm_mrdt_server, start => {hm_mrdt_server, start_link, []},
             restart => transient}]}}.

%% @doc The server of `Repo' on this node, started if needed.
-spec ensure_server(atom()) -> {ok, pid()} | {error, term()}.
ensure_server(Repo) ->
    case whereis(hm_mrdt_server:name(Repo)) of
        undefined ->
            case whereis(?MODULE) of
                undefined -> {error, {node_not_running, node()}};
                _ ->
                    case supervisor:start_child(?MODULE, [Repo]) of
                        {ok, Pid} -> {ok, Pid};
                        {error, {already_started, Pid}} -> {ok, Pid};
                        {error, _} = E -> E
                    end
            end;
        Pid -> {ok, Pid}
    end.
