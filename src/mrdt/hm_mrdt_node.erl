%% @doc One node's part of a repository, as pure functions: its public branch, the bases of
%% the sessions open on it, publish into the public branch, the remote refresh that merges
%% the other nodes' public branches, and history collection. After "Banyan:
%% Coordination-free Distributed Transactions over Mergeable Types", sections 3 (publish and
%% refresh), 4.2 (a public branch per replica, updated only by its replica; branches not fully
%% received are skipped) and 4.4 (which commits collection must keep).
%%
%% The node's state is written to the store as its branch record,
%% `{branch, Node} => {Head, Height, Bases}': only this node writes it, so it needs no
%% coordination; `Bases' are the commits its open sessions are based on.
%%
%% Invariants: the head only moves to a descendant of itself (a merge of it, or a
%% fast-forward), so every session base is an ancestor of the head; a remote head is merged
%% only once fully received ({@link hm_mrdt_commits:complete/2}); a remote head no higher than
%% a graft is already part of the head and is not merged again.
-module(hm_mrdt_node).

-export([new/2, head/1, bases/1, open/3, close/2, publish/4, publish_many/3, remote_refresh/3,
         compact/2, record/2, gc/5, max_graft/2]).
-export_type([state/0, branch_record/0]).

-opaque state() :: #{node := term(), head := hm_mrdt_history:commit(),
                     sessions := #{term() => hm_mrdt_history:commit()},
                     merged := #{term() => hm_mrdt_history:commit()}}.
-type branch_record() :: {hm_mrdt_history:commit(), integer(), [hm_mrdt_history:hash()]}.

%% @doc Node `Node' whose public branch is at `Head'.
-spec new(term(), hm_mrdt_history:commit()) -> state().
new(Node, Head) -> #{node => Node, head => Head, sessions => #{}, merged => #{}}.

-spec head(state()) -> hm_mrdt_history:commit().
head(#{head := H}) -> H.

%% @doc The bases of the open sessions.
-spec bases(state()) -> [hm_mrdt_history:hash()].
bases(#{sessions := Ss}) -> lists:usort([B || B <- maps:values(Ss), B =/= none]).

%% @doc A session `Id' is (now) based on `Base'.
-spec open(state(), term(), hm_mrdt_history:commit()) -> state().
open(N = #{sessions := Ss}, Id, Base) -> N#{sessions := Ss#{Id => Base}}.

%% @doc Session `Id' closed.
-spec close(state(), term()) -> state().
close(N = #{sessions := Ss}, Id) -> N#{sessions := maps:remove(Id, Ss)}.

%% @doc Publish: squash session `Id''s pending writes (`#{Key => {Type, Value}}', made over
%% its base) into one commit on the public branch. A key the branch changed since the base
%% merges with its type, the base being the LCA ({@link hm_mrdt_merge:merge_writes/4}).
%% Returns the new head; the session is then based on it.
-spec publish(state(), hm_mrdt_history:store(), term(), #{term() => {module(), term()}}) ->
          {ok, state(), hm_mrdt_history:store()} | {conflict, term()}.
publish(N, St, Id, Writes) ->
    case publish_many(N, St, [{Id, Writes}]) of
        {N1, St1, [{Id, ok}]} -> {ok, N1, St1};
        {_, _, [{Id, Conflict}]} -> Conflict
    end.

%% @doc Publish several sessions' writes at once (group commit): each session's writes are
%% merged, in turn, onto the public branch's tree with the writes of the sessions before it,
%% its base's tree being the LCA (every base is an ancestor of the head), and one commit on
%% the head holds them all; the pending and merged values of linked types are stored as
%% objects, since a later merge refers to them. A session whose merge conflicts is left out and reported. Every
%% session published is then based on the new head. The commit's new blocks carry a nonce
%% naming this node, the head and the sessions, so they are new names.
-spec publish_many(state(), hm_mrdt_history:store(),
                   [{term(), #{term() => {module(), term()}}}]) ->
          {state(), hm_mrdt_history:store(), [{term(), ok | {conflict, term()}}]}.
publish_many(N = #{node := Me, head := H, sessions := Ss}, St0, Batch) ->
    Nonce = hm_mrdt_history:nonce(St0),
    St1 = hm_mrdt_history:set_nonce(St0, {publish, Me, H, [Id || {Id, _} <- Batch]}),
    HeadTree = hm_mrdt_commits:tree_of(St1, H),
    %% the sessions of a group share few bases: each base's tree is read once
    Trees = maps:from_list([{B, hm_mrdt_commits:tree_of(St1, B)}
                            || B <- lists:usort([maps:get(Id, Ss, none) || {Id, _} <- Batch])]),
    {Writes, Results, St2} =
        lists:foldl(
          fun({Id, P}, {W, Rs, S}) ->
                  Base = maps:get(maps:get(Id, Ss, none), Trees),
                  case hm_mrdt_merge:merge_writes(S, Base, HeadTree, W, P) of
                      %% a merged linked value refers by hash to the pending one and to
                      %% the group's value before it (a merge no commit holds): store both
                      {ok, P1} -> {maps:merge(W, P1), [{Id, ok} | Rs],
                                   hm_mrdt_commits:put_objects(
                                     hm_mrdt_commits:put_objects(S, P), P1)};
                      {conflict, _} = Conflict -> {W, [{Id, Conflict} | Rs], S}
                  end
          end, {#{}, [], St1}, Batch),
    case map_size(Writes) of
        0 -> {N#{sessions := rebased(Ss, Results, H)}, St0, lists:reverse(Results)};
        _ ->
            {T, St3} = hm_mrdt_commits:write_tree(St2, HeadTree, Writes),
            {M, St4} = hm_mrdt_commits:commit(St3, [P || P <- [H], P =/= none], T),
            {N#{head := M, sessions := rebased(Ss, Results, M)},
             hm_mrdt_history:set_nonce(St4, Nonce), lists:reverse(Results)}
    end.

rebased(Ss, Results, Head) ->
    lists:foldl(fun({Id, ok}, Acc) -> Acc#{Id => Head};
                   (_, Acc) -> Acc
                end, Ss, Results).

%% @doc Remote refresh: merge into the head every other node's head (`Records': node to
%% branch record) that is new, fully received and not already included. Returns the state,
%% the store and the nodes skipped with the reason (`{missing, Key}' or `{conflict, R}').
-spec remote_refresh(state(), hm_mrdt_history:store(), #{term() => branch_record()}) ->
          {state(), hm_mrdt_history:store(), [{term(), term()}]}.
remote_refresh(N0 = #{node := Me}, St0, Records) ->
    MaxGraft = hm_mrdt_history:max_graft(St0),
    lists:foldl(
      fun({Node, _}, Acc) when Node =:= Me -> Acc;
         ({_, {none, _, _}}, Acc) -> Acc;
         ({Node, {RH, RHeight, _}}, {N = #{head := H, merged := Mg}, St, Skipped}) ->
              case maps:get(Node, Mg, none) of
                  RH -> {N, St, Skipped};
                  _ when RHeight >= 0, RHeight =< MaxGraft, RH =/= H ->
                      {N#{merged := Mg#{Node => RH}}, St, Skipped};
                  _ ->
                      case hm_mrdt_commits:complete(St, RH) of
                          true ->
                              case hm_mrdt_merge:merge_commits(St, H, RH) of
                                  {ok, M, St1} ->
                                      {N#{head := M, merged := Mg#{Node => RH}}, St1, Skipped};
                                  {conflict, R} -> {N, St, [{Node, {conflict, R}} | Skipped]}
                              end;
                          Missing -> {N, St, [{Node, Missing} | Skipped]}
                      end
              end
      end, {N0, St0, []}, lists:sort(maps:to_list(Records))).

%% @doc Compaction: a commit on the head with the same tree, every leaf and blob copied into
%% its own pack ({@link hm_mrdt_commits:repack/2}), when the head's tree shares blocks with
%% older commits' packs; `none' otherwise. A commit's record holds every block it created,
%% so a pack stays while any of its blocks is still in use: under a steady load the head's
%% tree uses one leaf of each of many packs. Once the floor of collection passes the
%% compaction, those packs go. The head moves to a descendant, as a publish moves it.
-spec compact(state(), hm_mrdt_history:store()) ->
          {ok, state(), hm_mrdt_history:store()} | none.
compact(#{head := none}, _) -> none;
compact(N = #{node := Me, head := H}, St0) ->
    case hm_mrdt_commits:packs(St0, H) -- [H] of
        [] -> none;
        _ ->
            Nonce = hm_mrdt_history:nonce(St0),
            St1 = hm_mrdt_history:set_nonce(St0, {compact, Me, H}),
            {T, St2} = hm_mrdt_commits:repack(St1, hm_mrdt_commits:tree_of(St1, H)),
            {C, St3} = hm_mrdt_commits:commit(St2, [H], T),
            {ok, N#{head := C}, hm_mrdt_history:set_nonce(St3, Nonce)}
    end.

%% @doc The node's branch record.
-spec record(state(), hm_mrdt_history:store()) -> branch_record().
record(N = #{head := H}, St) ->
    Height = case H of
                 none -> -1;
                 _ -> case hm_mrdt_commits:commit_info(St, H) of
                          {ok, {_, _, Ht}} -> Ht;
                          not_found -> -1
                      end
             end,
    {H, Height, bases(N)}.

%% @doc History collection from this node's view: the roots are every node's head and
%% session bases (`Records', which must hold a record of each of `Nodes', this node's
%% included); `not_ready' when one is missing.
%% The plan's grafts include `{floor, Node} => Height', the height of this node's latest
%% floor: {@link max_graft/2} reads these keys instead of scanning the grafts.
-spec gc(state(), hm_mrdt_history:store(), [term()], #{term() => branch_record()},
         [{[hm_mrdt_history:hash()], hm_mrdt_history:hash()}]) ->
          hm_mrdt_collect:gc_plan() | not_ready.
gc(#{node := Me}, St, Nodes, Records, Cache) ->
    case lists:all(fun(Nd) -> is_map_key(Nd, Records) end, Nodes) of
        false -> not_ready;
        true ->
            Roots = lists:append([[H | Bs] || {H, _, Bs} <- maps:values(Records)]),
            case hm_mrdt_collect:gc_plan(St, Roots, Cache) of
                Plan = #{graft := [{_, HB}]} ->
                    Plan#{graft := maps:get(graft, Plan) ++ [{{floor, Me}, HB}]};
                Plan -> Plan
            end
    end.

%% @doc The height of the highest floor any of `Nodes' collected up to (-1 if none), from
%% their `{floor, Node}' keys read with `Fetch'.
-spec max_graft(fun((term()) -> {ok, term()} | not_found), [term()]) -> integer().
max_graft(Fetch, Nodes) ->
    lists:max([-1 | [H || Nd <- Nodes, {ok, H} <- [Fetch({floor, Nd})]]]).
