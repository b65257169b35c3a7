%% @doc Sessions over mergeable types: coordination-free transactions on a repository
%% replicated over EC tables (after "Banyan: Coordination-free Distributed Transactions over
%% Mergeable Types", section 3, Fig. 4: connect, read, write, publish, refresh, close).
%%
%% ```
%% ok = hm_session:create_repo(cache, [{nodes, Nodes}, {storage, ram_copies}]),
%% {ok, S} = hm_session:connect(cache),
%% ok = hm_session:write(S, hits, hm_mrdt_counter, 1),
%% ok = hm_session:publish(S),      % the writes since the last publish, all at once
%% ok = hm_session:refresh(S),      % see what other sessions and nodes published
%% {ok, N} = hm_session:read(S, hits),
%% ok = hm_session:close(S).
%% '''
%%
%% == Semantics ==
%% A session is a process, started by {@link connect/1} on the caller's node and monitored
%% by nothing but its owner: it ends when the caller ends (without publishing) or on
%% {@link close/1} (which publishes first, as Banyan does). Any process may use the handle;
%% calls are served in order. A session sees a snapshot of its node's public branch plus its
%% own writes. {@link publish/1} makes all its writes since the last publish visible at once,
%% merged into the node's public branch under a lock local to the node;
%% {@link refresh/1} merges into the node's public branch the other nodes' branches it has
%% fully received, then moves the session to it, keeping its own unpublished writes (each
%% merged with what arrived, by its type's three-way merge). No session ever sees part of
%% another's publish. Conflicting updates of a key merge with the key's type
%% ({@link hm_mrdt}); a type that cannot merge makes `publish' or `refresh' return
%% `{error, {conflict, {Key, Reason}}}' and leaves the session as it was.
%%
%% == Errors ==
%% `{error, {no_such_repo, Repo}}' (no copy of the repository on this node),
%% `{error, {node_not_running, Node}}' (the hypermnesia application is not running),
%% `{error, closed}' (a session that was closed or whose owner ended),
%% `{error, {bad_type, T}}', `{error, {bad_value, T, V}}', `{error, {type_mismatch, Key, T}}'
%% from {@link write/4}, `{error, {conflict, R}}' from {@link publish/1} and {@link refresh/1},
%% `{error, {bad_option, O}}' and `{error, {already_exists, Repo}}' from
%% {@link create_repo/2}.
-module(hm_session).
-behaviour(gen_server).

-export([create_repo/2, delete_repo/1, connect/1, read/2, write/4, publish/1, refresh/1,
         close/1, gc/1, info/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).
-export_type([session/0]).

-opaque session() :: {hm_session, atom(), pid()}.

%%% ------------------------------------------------------------------ repositories

%% @doc Create repository `Repo' (an atom): an EC table with a copy on each node of
%% `{nodes, Nodes}' (default: this node), held as `{storage, ram_copies | disc_copies}'
%% (default `ram_copies'). Mnesia-style `{ram_copies, Nodes}' or `{disc_copies, Nodes}' work
%% too. `Opts' is a list of such tuples or a map with keys `nodes' and `storage'.
-spec create_repo(atom(), [tuple()] | map()) -> ok | {error, term()}.
create_repo(Repo, Opts) when is_atom(Repo), is_map(Opts) ->
    create_repo(Repo, maps:to_list(Opts));
create_repo(Repo, Opts) when is_atom(Repo), is_list(Opts) ->
    case repo_options(Opts, #{nodes => [node()], storage => ram_copies}) of
        {ok, O = #{nodes := Nodes}} ->
            case hm_mrdt_store:create(Repo, O) of
                ok ->
                    %% start the repository's server on each of its nodes now
                    _ = erpc:multicall(Nodes, hm_mrdt_sup, ensure_server, [Repo], 30000),
                    ok;
                {error, _} = E -> E
            end;
        {error, _} = E -> E
    end;
create_repo(Repo, Opts) -> {error, {bad_option, {Repo, Opts}}}.

repo_options([], O) -> {ok, O};
repo_options([{nodes, Ns} | T], O) when is_list(Ns), Ns =/= [] -> repo_options(T, O#{nodes := Ns});
repo_options([{storage, St} | T], O) when St =:= ram_copies; St =:= disc_copies ->
    repo_options(T, O#{storage := St});
repo_options([{St, Ns} | T], O) when (St =:= ram_copies orelse St =:= disc_copies),
                                     is_list(Ns), Ns =/= [] ->
    repo_options(T, O#{storage := St, nodes := Ns});
repo_options([Bad | _], _) -> {error, {bad_option, Bad}}.

%% @doc Delete repository `Repo' and its history, everywhere.
-spec delete_repo(atom()) -> ok | {error, term()}.
delete_repo(Repo) ->
    _ = [supervisor:terminate_child(hm_mrdt_sup, P) || P <- [whereis(hm_mrdt_server:name(Repo))],
                                                         is_pid(P)],
    case hm_ec_registry:delete_table(hm_mrdt_store:table(Repo)) of
        {atomic, ok} -> ok;
        {aborted, R} -> {error, R}
    end.

%%% ------------------------------------------------------------------ sessions

%% @doc A session on this node, based on the node's public branch after a refresh.
-spec connect(atom()) -> {ok, session()} | {error, term()}.
connect(Repo) when is_atom(Repo) ->
    case hm_mrdt_store:exists(Repo) of
        false -> {error, {no_such_repo, Repo}};
        true ->
            case hm_mrdt_sup:ensure_server(Repo) of
                {ok, Server} ->
                    {ok, Pid} = gen_server:start(?MODULE, {Repo, Server, self()}, []),
                    {ok, {hm_session, Repo, Pid}};
                {error, _} = E -> E
            end
    end;
connect(Repo) -> {error, {no_such_repo, Repo}}.

%% @doc Read `Key': `{ok, Value}' or `not_found'.
-spec read(session(), term()) -> {ok, term()} | not_found | {error, term()}.
read(S, Key) -> call(S, {read, Key}).

%% @doc Write `Value' to `Key', a value of type `Type' (a module implementing
%% {@link hm_mrdt}); visible to this session at once, to others after {@link publish/1}.
-spec write(session(), term(), module(), term()) -> ok | {error, term()}.
write(S, Key, Type, Value) -> call(S, {write, Key, Type, Value}).

%% @doc Make every write since the last publish visible, together, in this node's public
%% branch.
-spec publish(session()) -> ok | {error, term()}.
publish(S) -> call(S, publish).

%% @doc Merge the other nodes' public branches (those fully received) into this node's,
%% then move this session to it, keeping its unpublished writes.
-spec refresh(session()) -> ok | {error, term()}.
refresh(S) -> call(S, refresh).

%% @doc Publish, then end the session (also when the publish fails: its result is returned).
-spec close(session()) -> ok | {error, term()}.
close(S = {hm_session, _, Pid}) ->
    R = call(S, publish),
    _ = call(S, close),
    case R of
        {error, closed} -> ok;
        _ -> stop_quietly(Pid), R
    end.

%% @doc Run history collection on this node now (it also runs every second): a remote
%% refresh, then the deletion of history no session and no public branch needs.
-spec gc(atom()) -> #{deleted := non_neg_integer(), floor := binary() | none} | not_ready |
          {error, term()}.
gc(Repo) -> with_server(Repo, fun hm_mrdt_server:gc/1).

%% @doc This node's view of `Repo': its public branch's head, the open sessions and their
%% bases, the branches the last refresh skipped, and the size of the local copy.
-spec info(atom()) -> map() | {error, term()}.
info(Repo) -> with_server(Repo, fun hm_mrdt_server:info/1).

with_server(Repo, Fun) ->
    case hm_mrdt_store:exists(Repo) andalso hm_mrdt_sup:ensure_server(Repo) of
        false -> {error, {no_such_repo, Repo}};
        {ok, Server} -> Fun(Server);
        {error, _} = E -> E
    end.

call({hm_session, _, Pid}, Req) ->
    try gen_server:call(Pid, Req, infinity)
    catch exit:{noproc, _} -> {error, closed};
          exit:{normal, _} -> {error, closed};
          exit:{shutdown, _} -> {error, closed}
    end;
call(_, _) -> {error, closed}.

%% The session process may already be gone (closed by the call before, or its owner died).
stop_quietly(Pid) ->
    try gen_server:stop(Pid)
    catch exit:_ -> ok
    end.

%%% ------------------------------------------------------------------ the session process

-spec init({atom(), pid(), pid()}) -> {ok, map()}.
init({Repo, Server, Owner}) ->
    _ = monitor(process, Owner),
    _ = monitor(process, Server),
    {ok, Id, Base} = hm_mrdt_server:connect(Server, self()),
    {ok, #{tab => hm_mrdt_store:table(Repo), server => Server, id => Id,
           session => hm_mrdt_session:new(Id, Base), cache => #{}}}.

-spec handle_call(term(), {pid(), term()}, map()) -> {reply, term(), map()} |
          {stop, normal, ok, map()}.
handle_call({read, Key}, _, S = #{cache := C}) ->
    case C of
        #{Key := R} -> {reply, R, S};
        _ ->
            {St, S1} = base_reader(S),
            R = hm_mrdt_session:read(session(S1), St, Key),
            {reply, R, S1#{cache := C#{Key => R}}}
    end;
handle_call({write, Key, Type, Value}, _, S = #{cache := C}) ->
    {St, S1} = base_reader(S),
    case hm_mrdt_session:write(session(S1), St, Key, Type, Value) of
        {ok, Sess} -> {reply, ok, S1#{session := Sess, cache := maps:remove(Key, C)}};
        {error, _} = E -> {reply, E, S1}
    end;
handle_call(publish, _, S = #{tab := Tab, server := Server, id := Id}) ->
    Sess = session(S),
    case hm_mrdt_session:pending(Sess) of
        P when map_size(P) =:= 0 -> {reply, ok, S};
        P ->
            %% linked values the writes refer to, before the commit that names the writes
            ok = hm_mrdt_store:write(Tab, hm_mrdt_session:objects(Sess), []),
            case hm_mrdt_server:publish(Server, Id, P) of
                {ok, Head} ->
                    {reply, ok, S#{session := hm_mrdt_session:published(Sess, Head),
                                   cache := #{}}};
                {conflict, R} -> {reply, {error, {conflict, R}}, S}
            end
    end;
handle_call(refresh, _, S = #{server := Server, id := Id}) ->
    {ok, Head} = hm_mrdt_server:refresh(Server, Id),
    case hm_mrdt_session:rebase(session(S), reader(S), Head) of
        {ok, Sess} ->
            ok = hm_mrdt_server:rebased(Server, Id, Head),
            {reply, ok, S#{session := Sess, cache := #{}}};
        {conflict, R} -> {reply, {error, {conflict, R}}, S}
    end;
handle_call(close, _, S = #{server := Server, id := Id}) ->
    ok = hm_mrdt_server:close(Server, Id),
    {stop, normal, ok, S}.

-spec handle_cast(term(), map()) -> {noreply, map()}.
handle_cast(_, S) -> {noreply, S}.

-spec handle_info(term(), map()) -> {noreply, map()} | {stop, normal, map()}.
handle_info({'DOWN', _, process, _, _}, S) -> {stop, normal, S};
handle_info(_, S) -> {noreply, S}.

session(#{session := Sess}) -> Sess.

reader(#{tab := Tab}) -> hm_mrdt_store:reader(Tab).

%% A reader that already holds the commit and tree of the session's base: reads between two
%% moves of the base (a publish or a refresh) fetch only their leaf.
base_reader(S) ->
    St = reader(S),
    Base = hm_mrdt_session:base(session(S)),
    Known = case S of
                #{known := {Base, K}} -> K;
                _ -> hm_mrdt_history:known(St, Base)
            end,
    {hm_mrdt_history:with_known(St, Known), S#{known => {Base, Known}}}.
