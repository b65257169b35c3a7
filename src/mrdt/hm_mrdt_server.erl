%% @doc One repository on one node: the thin process that holds {@link hm_mrdt_node}'s state
%% (the public branch and the bases of the sessions open here) and carries out its effects on
%% the repository's EC table ({@link hm_mrdt_store}). After "Banyan: Coordination-free
%% Distributed Transactions over Mergeable Types", sections 3 and 4.2: it is the node-local
%% lock of the public branch (its mailbox orders publishes, refreshes and collections; no
%% other node takes part), and it pulls the other nodes' public branches periodically (remote
%% refresh) as well as on every session refresh and connect. Publishes waiting in its mailbox
%% are merged together into one commit of the public branch (group commit,
%% {@link hm_mrdt_node:publish_many/3}).
%%
%% Every `interval' milliseconds (application environment `mrdt_interval_ms', default 1000)
%% it runs a remote refresh and then history collection ({@link hm_mrdt_node:gc/5}), preceded
%% on the first running node of the repository by a compaction
%% ({@link hm_mrdt_node:compact/2}) when its head did not move since the last tick, unless
%% the application environment `mrdt_collect' is `false' (read on every tick; then history
%% is only collected on {@link gc/1}, and the repository keeps every version, as Banyan
%% does). A
%% session whose process dies is closed. After a restart the public branch is read back from
%% the node's branch record; the sessions of before are gone, so the record is rewritten
%% without their bases. It stops when the repository's table is deleted.
-module(hm_mrdt_server).
-behaviour(gen_server).

-export([start_link/1, name/1, connect/2, publish/3, refresh/2, rebased/3, close/2, gc/1,
         info/1]).
-export([init/1, handle_call/3, handle_cast/2, handle_info/2]).

-define(WAIT_MS, 30000).

%% @doc Start the server of `Repo' (by {@link hm_mrdt_sup}).
-spec start_link(atom()) -> {ok, pid()} | {error, term()}.
start_link(Repo) -> gen_server:start_link({local, name(Repo)}, ?MODULE, Repo, []).

%% @doc The registered name of the server of `Repo'.
-spec name(atom()) -> atom().
name(Repo) -> list_to_atom("hm_mrdt_server_" ++ atom_to_list(Repo)).

%% @doc Open a session for process `Owner': a remote refresh, then the session's id and base.
-spec connect(pid(), pid()) -> {ok, reference(), hm_mrdt_history:commit()}.
connect(Server, Owner) -> gen_server:call(Server, {connect, Owner}, infinity).

%% @doc Squash session `Id''s pending writes into a commit of the public branch.
-spec publish(pid(), reference(), #{term() => {module(), term()}}) ->
          {ok, hm_mrdt_history:commit()} | {conflict, term()}.
publish(Server, Id, Writes) -> gen_server:call(Server, {publish, Id, Writes}, infinity).

%% @doc Remote refresh; returns the public branch's head.
-spec refresh(pid(), reference()) -> {ok, hm_mrdt_history:commit()}.
refresh(Server, Id) -> gen_server:call(Server, {refresh, Id}, infinity).

%% @doc Session `Id' is now based on `Base'.
-spec rebased(pid(), reference(), hm_mrdt_history:commit()) -> ok.
rebased(Server, Id, Base) -> gen_server:call(Server, {rebased, Id, Base}, infinity).

%% @doc Session `Id' is closed.
-spec close(pid(), reference()) -> ok.
close(Server, Id) -> gen_server:call(Server, {close, Id}, infinity).

waiting_publishes() ->
    receive {'$gen_call', From, {publish, Id, W}} -> [{From, Id, W} | waiting_publishes()]
    after 0 -> []
    end.

%% @doc Run a remote refresh and history collection now; returns what collection deleted.
-spec gc(pid()) -> #{deleted := non_neg_integer(), floor := hm_mrdt_history:hash() | none} |
          not_ready.
gc(Server) -> gen_server:call(Server, gc, infinity).

%% @doc The public branch's head, the open sessions, and the table's size on this node.
-spec info(pid()) -> map().
info(Server) -> gen_server:call(Server, info, infinity).

%%% ------------------------------------------------------------------ callbacks

-spec init(atom()) -> {ok, map()} | ignore.
init(Repo) ->
    Tab = hm_mrdt_store:table(Repo),
    case hm_mrdt_store:exists(Repo) andalso mnesia:wait_for_tables([Tab], ?WAIT_MS) of
        ok -> init(Repo, Tab);
        _ -> ignore
    end.

init(Repo, Tab) ->
    Head = case (hm_mrdt_store:fetch(Tab))({branch, node()}) of
               {ok, {H, _, _}} -> H;
               not_found -> none
           end,
    Interval = application:get_env(hypermnesia, mrdt_interval_ms, 1000),
    S = #{repo => Repo, tab => Tab, node => hm_mrdt_node:new(node(), Head), written => none,
          known => {none, #{}}, idle_head => none,
          monitors => #{}, interval => Interval, skipped => []},
    _ = erlang:send_after(Interval, self(), tick),
    {ok, save(S, [])}.

-spec handle_call(term(), {pid(), term()}, map()) -> {reply, term(), map()} |
          {noreply, map()}.
handle_call({connect, Owner}, _, S0) ->
    S = #{node := N, monitors := Ms} = remote_refresh(S0),
    Id = make_ref(),
    MRef = monitor(process, Owner),
    Head = hm_mrdt_node:head(N),
    {reply, {ok, Id, Head},
     save(S#{node := hm_mrdt_node:open(N, Id, Head), monitors := Ms#{MRef => Id}}, [])};
handle_call({publish, Id, W}, From, S = #{node := N}) ->
    %% group commit: every publish already waiting is merged with this one, in one commit
    Batch = [{From, Id, W} | waiting_publishes()],
    {N1, St, Results} = hm_mrdt_node:publish_many(N, head_reader(S),
                                                  [{I, Ws} || {_, I, Ws} <- Batch]),
    S1 = save(S#{node := N1}, St),
    Head = hm_mrdt_node:head(N1),
    [gen_server:reply(F, case R of ok -> {ok, Head}; Conflict -> Conflict end)
     || {{F, _, _}, {_, R}} <- lists:zip(Batch, Results)],
    {noreply, S1};
handle_call({refresh, _Id}, _, S0) ->
    S = #{node := N} = remote_refresh(S0),
    {reply, {ok, hm_mrdt_node:head(N)}, S};
handle_call({rebased, Id, Base}, _, S = #{node := N}) ->
    {reply, ok, save(S#{node := hm_mrdt_node:open(N, Id, Base)}, [])};
handle_call({close, Id}, _, S) ->
    {reply, ok, close_session(S, Id)};
handle_call(gc, _, S0) ->
    {Result, S} = collect(remote_refresh(S0)),
    {reply, Result, S};
handle_call(info, _, S = #{node := N, tab := Tab, monitors := Ms, skipped := Sk}) ->
    St = hm_mrdt_store:store(Tab, repo_nodes(S)),
    {_, Height, _} = hm_mrdt_node:record(N, St),
    {reply, #{head => hm_mrdt_node:head(N), height => Height, sessions => map_size(Ms),
              floor_height => hm_mrdt_history:max_graft(St),
              bases => hm_mrdt_node:bases(N), skipped => Sk,
              table => hm_mrdt_store:size(Tab)}, S}.

-spec handle_cast(term(), map()) -> {noreply, map()}.
handle_cast(_, S) -> {noreply, S}.

-spec handle_info(term(), map()) -> {noreply, map()} | {stop, normal, map()}.
handle_info(tick, S0 = #{interval := I, repo := Repo}) ->
    try tick(S0) of
        S -> _ = erlang:send_after(I, self(), tick),
             {noreply, S}
    catch Class:Reason:Stack ->
            case hm_mrdt_store:exists(Repo) of
                false -> ok = hm_mrdt_store:purge_unpacked(hm_mrdt_store:table(Repo)),
                         {stop, normal, S0};     % deleted, before this tick or during it
                true -> erlang:raise(Class, Reason, Stack)
            end
    end;
handle_info({'DOWN', MRef, process, _, _}, S = #{monitors := Ms}) ->
    case maps:take(MRef, Ms) of
        {Id, Ms1} -> {noreply, close_session(S#{monitors := Ms1}, Id)};
        error -> {noreply, S}
    end;
handle_info(_, S) -> {noreply, S}.

%%% ------------------------------------------------------------------ internals

%% Remote refresh, then collection unless switched off.
tick(S0 = #{repo := Repo}) ->
    true = hm_mrdt_store:exists(Repo),
    S = remote_refresh(S0),
    case application:get_env(hypermnesia, mrdt_collect, true) of
        false -> S;
        _ -> element(2, collect(compact(S)))
    end.

%% Compaction (hm_mrdt_node:compact/2) by one node of the repository, the first of those
%% running, once its head has not moved for a whole interval: under load the head's tree
%% shares blocks with the packs of many older commits, which collection must then keep;
%% when the load stops, one commit copying them lets collection delete those packs. One
%% node compacts, so that the others fast-forward to its compaction instead of merging
%% several.
compact(S = #{node := N, idle_head := Prev}) ->
    Head = hm_mrdt_node:head(N),
    S1 = S#{idle_head := Head},
    case Head =:= Prev andalso node() =:= lists:min([Nd || Nd <- repo_nodes(S),
                                                          Nd =:= node() orelse
                                                              lists:member(Nd, nodes())]) of
        false -> S1;
        true ->
            case hm_mrdt_node:compact(N, head_reader(S1)) of
                {ok, N1, St} -> S2 = save(S1#{node := N1}, St),
                                S2#{idle_head := hm_mrdt_node:head(N1)};
                none -> S1
            end
    end.

repo_nodes(#{repo := Repo}) -> hm_mrdt_store:nodes(Repo).

close_session(S = #{node := N, monitors := Ms}, Id) ->
    Ms1 = maps:filter(fun(MRef, I) when I =:= Id -> demonitor(MRef, [flush]), false;
                         (_, _) -> true
                      end, Ms),
    save(S#{node := hm_mrdt_node:close(N, Id), monitors := Ms1}, []).

remote_refresh(S = #{tab := Tab, node := N}) ->
    Nodes = repo_nodes(S),
    {N1, St, Skipped} = hm_mrdt_node:remote_refresh(N, hm_mrdt_store:store(Tab, Nodes),
                                                    hm_mrdt_store:records(Tab, Nodes)),
    save(S#{node := N1, skipped := Skipped}, St).

%% Write the step's blocks, then this node's branch record if it changed.
save(S = #{tab := Tab, node := N, written := Old}, St) ->
    {Puts, Commits} = case St of
                          [] -> {[], []};
                          _ -> {hm_mrdt_history:writes(St), hm_mrdt_history:new_commits(St)}
                      end,
    ok = hm_mrdt_store:keep_unpacked(Tab, Commits),
    ok = hm_mrdt_store:write(Tab, Puts, []),
    Head = hm_mrdt_node:head(N),
    S1 = case {St, S} of
             {[], _} -> S;
             {_, #{known := {Head, _}}} -> S;
             _ -> S#{known := {Head, hm_mrdt_history:known(St, Head)}}
         end,
    %% the record names the head's height: computed once the head's commit is written
    case hm_mrdt_node:record(N, head_reader(S1)) of
        Old -> S1;
        Record -> ok = hm_mrdt_store:write(Tab, [{{branch, node()}, Record}], []),
                  S1#{written := Record}
    end.

%% A reader of the local copy that already holds the head's commit and tree (see
%% hm_mrdt_history:known/2): a publish reads the head's tree without copying it out of the
%% table. Only blocks the head's step wrote are held, so they are in the table too.
head_reader(#{tab := Tab, node := N, known := {Head, Known}}) ->
    St = hm_mrdt_store:reader(Tab),
    case hm_mrdt_node:head(N) of
        Head -> hm_mrdt_history:with_known(St, Known);
        _ -> St
    end.

collect(S = #{tab := Tab, node := N}) ->
    Nodes = repo_nodes(S),
    St = hm_mrdt_store:store(Tab, Nodes),
    Records = (hm_mrdt_store:records(Tab, Nodes))#{node() => hm_mrdt_node:record(N, St)},
    case hm_mrdt_node:gc(N, St, Nodes, Records, hm_mrdt_store:cache(Tab)) of
        not_ready -> {not_ready, S};
        #{floor := Floor, graft := G, delete := D} ->
            ok = hm_mrdt_store:write(Tab, G, D),
            ok = hm_mrdt_store:purge_unpacked(Tab),
            {#{deleted => length(D), floor => Floor}, S}
    end.
