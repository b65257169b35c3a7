%% @doc The ancestry of commits, as pure functions over a {@link hm_mrdt_history:store()}:
%% whether a commit is an ancestor of another, the ancestors of a set of commits, and the
%% lowest common ancestors (LCAs) of two commits, which a three-way merge merges from
%% ({@link hm_mrdt_merge}). After "Banyan: Coordination-free Distributed Transactions over
%% Mergeable Types", sections 4.1 (the Git object model) and 4.3 (several LCAs in
%% criss-cross histories).
%%
%% == Invariants ==
%% <ul>
%% <li>Walks stop at grafts (`{graft, Hash}': the ancestors of that commit were collected,
%% see {@link hm_mrdt_collect}) and at commits not in the store: ancestry is that of the
%% history the store holds.</li>
%% <li>A commit is lower than its descendants ({@link hm_mrdt_commits}), so a walk looking
%% for an ancestor goes no lower than that ancestor's height.</li>
%% <li>The LCAs of two commits are sorted, and none is an ancestor of another.</li>
%% </ul>
-module(hm_mrdt_ancestry).

-export([is_ancestor/3, lcas/3]).
%% For hm_mrdt_collect.
-export([parents/3, ancestors/3, common/1, maximal/1]).

-type store() :: hm_mrdt_history:store().
-type hash() :: hm_mrdt_history:hash().

%%% ------------------------------------------------------------------ ancestry

%% @doc Whether `X' is an ancestor of `Y' (or `Y' itself). Walks back from `Y' no lower than
%% `X''s height; stops at grafts and at commits not in the store.
-spec is_ancestor(store(), hash(), hash()) -> boolean().
is_ancestor(_, X, X) -> true;
is_ancestor(St, X, Y) ->
    case hm_mrdt_commits:commit_info(St, X) of
        {ok, {_, _, HX}} -> walk_to(St, X, HX, [Y], #{});
        not_found -> false
    end.

walk_to(_, _, _, [], _) -> false;
walk_to(_, X, _, [X | _], _) -> true;
walk_to(St, X, HX, [C | Cs], Seen) ->
    case Seen of
        #{C := _} -> walk_to(St, X, HX, Cs, Seen);
        _ ->
            Next = case hm_mrdt_commits:commit_info(St, C) of
                       {ok, {Ps, _, H}} when H > HX -> parents(St, C, Ps);
                       _ -> []
                   end,
            walk_to(St, X, HX, Next ++ Cs, Seen#{C => true})
    end.

%% @doc The parents `Ps' of commit `C', or `[]' when `C' is a graft (its ancestors were
%% collected).
-spec parents(store(), hash(), [hash()]) -> [hash()].
parents(St, C, Ps) ->
    case hm_mrdt_history:get(St, {graft, C}) of
        {ok, _} -> [];
        not_found -> Ps
    end.

%% @doc `#{Commit => Parents}' for every commit reachable from `Cs', not expanding `Stop'
%% (its parents are `[]'), nor grafts; commits not in the store are left out.
-spec ancestors(store(), [hash()], hash() | none) -> #{hash() => [hash()]}.
ancestors(St, Cs, Stop) -> ancestors(St, Cs, Stop, #{}).

ancestors(_, [], _, Acc) -> Acc;
ancestors(St, [C | Cs], Stop, Acc) ->
    case Acc of
        #{C := _} -> ancestors(St, Cs, Stop, Acc);
        _ ->
            Ps = case hm_mrdt_commits:commit_info(St, C) of
                     {ok, {Ps0, _, _}} when C =/= Stop -> parents(St, C, Ps0);
                     {ok, _} -> [];
                     not_found -> missing
                 end,
            case Ps of
                missing -> ancestors(St, Cs, Stop, Acc);
                _ -> ancestors(St, Ps ++ Cs, Stop, Acc#{C => Ps})
            end
    end.

%% @doc The lowest common ancestors of two commits: the common ancestors that are not an
%% ancestor of another common ancestor (`[]': no shared history).
-spec lcas(store(), hash(), hash()) -> [hash()].
lcas(_, A, A) -> [A];
lcas(St, A, B) ->
    case {is_ancestor(St, A, B), is_ancestor(St, B, A)} of
        {true, _} -> [A];
        {_, true} -> [B];
        _ -> maximal(common([ancestors(St, [A], none), ancestors(St, [B], none)]))
    end.

%% @doc The commits common to every map of {@link ancestors/3} (with the first map's
%% parents).
-spec common([#{hash() => [hash()]}, ...]) -> #{hash() => [hash()]}.
common([M | Ms]) ->
    lists:foldl(fun(M2, Acc) -> maps:filter(fun(K, _) -> is_map_key(K, M2) end, Acc) end,
                M, Ms).

%% @doc The maximal commits of `Common' (from {@link common/1}), sorted. Common is closed
%% under ancestors: its maximal elements are those no member names as a parent.
-spec maximal(#{hash() => [hash()]}) -> [hash()].
maximal(Common) ->
    NotMax = maps:from_list([{P, true} || Ps <- maps:values(Common), P <- Ps]),
    lists:sort([C || C <- maps:keys(Common), not is_map_key(C, NotMax)]).
