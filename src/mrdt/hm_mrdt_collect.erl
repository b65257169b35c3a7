%% @doc History collection, as pure functions over a {@link hm_mrdt_history:store()}: the
%% plan of what may be deleted, given the roots every node and session may still merge
%% from. After "Banyan: Coordination-free Distributed Transactions over Mergeable Types",
%% section 4.4 (garbage collection, which Banyan sketches and this module implements). The
%% caller writes the plan's grafts, then deletes its keys.
%%
%% == Invariants ==
%% <ul>
%% <li>History collection ({@link gc_plan/3}) deletes only the strict ancestors of a commit
%% `B' that every root descends from and that every commit reachable from the roots is
%% comparable with (an ancestor or a descendant): then every LCA of two commits that descend
%% from the roots descends from `B', so merges never need what was deleted.</li>
%% <li>A deleted commit's record stays while its pack holds a block `B''s tree shares (the
%% only old blocks a kept commit can share).</li>
%% <li>Objects are deleted only when a deleted commit's value reaches them and no kept
%% commit's value does; an object no commit reaches yet (stored for a publish under way) is
%% never deleted.</li>
%% </ul>
-module(hm_mrdt_collect).

-export([gc_plan/3]).
-export_type([gc_plan/0]).

-type store() :: hm_mrdt_history:store().
-type hash() :: hm_mrdt_history:hash().
-type commit() :: hm_mrdt_history:commit().
-type key() :: hm_mrdt_history:key().
-type gc_plan() :: #{floor := hash() | none, delete := [key()], graft := [key()]}.

%%% ------------------------------------------------------------------ collection

%% @doc What history collection may delete, given the roots (every node's public branch and
%% the bases of every open session) and the cache entries in the store. Finds the floor `B':
%% the single maximal common ancestor of all roots, if every commit reachable from the roots
%% without passing `B' is a descendant of `B'. Deletes the records of `B''s strict ancestors
%% and of the merge commits only the cache entries naming one of them named (and those
%% entries), but not of a commit whose pack holds a leaf or blob `B''s tree shares (it is
%% named again, through the dead trees that reach it, once a later floor no longer shares
%% it), and the objects (values of linked types) that their values reach and no kept
%% commit's values reach. `graft' must be written before `delete'. Nothing when a root
%% is missing or `none' (a node whose branch is empty may merge any commit next), or there
%% is no such floor.
-spec gc_plan(store(), [commit()], [{[hash()], hash()}]) -> gc_plan().
gc_plan(St, Roots0, Cache) ->
    Roots = lists:usort(Roots0),
    None = #{floor => none, delete => [], graft => []},
    %% a root `none' (a node with an empty branch) may merge any old commit next: keep all
    case Roots =/= [] andalso not lists:member(none, Roots) andalso
        lists:all(fun(R) -> hm_mrdt_commits:commit_info(St, R) =/= not_found end, Roots) of
        false -> None;
        true ->
            try plan(St, Roots, Cache, None)
            catch throw:{missing, _} -> None
            end
    end.

plan(St, Roots, Cache, None) ->
    %% fast path: the lowest root is often the floor (a session's base, a lagging branch);
    %% one walk down to its height decides
    {_, Low} = lists:min([{element(3, element(2, hm_mrdt_commits:commit_info(St, R))), R}
                          || R <- Roots]),
    plan_from(St, Low, Roots, Cache, None, 20).

%% Try candidate B; a walk that escapes below it (a commit reaching older history, such as
%% a publish on an old session base) proposes the lowest commit it escaped to.
plan_from(St, B, Roots, Cache, None, Tries) ->
    case above(St, B, Roots) of
        {ok, Above} -> plan_below(St, B, Above, Cache, None);
        {escaped, X} when Tries > 0, X =/= B -> plan_from(St, X, Roots, Cache, None, Tries - 1);
        _ when length(Roots) =< 8 -> plan_general(St, Roots, Cache, None);
        _ -> None
    end.

plan_general(St, Roots, Cache, None) ->
    Ancestors = [hm_mrdt_ancestry:ancestors(St, [R], none) || R <- Roots],
    case hm_mrdt_ancestry:maximal(hm_mrdt_ancestry:common(Ancestors)) of
        [B] ->
            Above = hm_mrdt_ancestry:ancestors(St, Roots, B),
            Below = maps:remove(B, hm_mrdt_ancestry:ancestors(St, [B], none)),
            case lists:any(fun(C) -> is_map_key(C, Below) end, maps:keys(Above)) of
                true -> None;
                false -> plan_below(St, B, Above, Cache, None)
            end;
        _ -> None
    end.

plan_below(St, B, Above, Cache, None) ->
    Below = maps:remove(B, hm_mrdt_ancestry:ancestors(St, [B], none)),
    case map_size(Below) of
        0 -> None;
        _ -> plan(St, B, Above, Below, Cache)
    end.

%% {ok, commits reachable from Roots down to B} if every path from every root reaches B
%% (B is a common ancestor that every reachable commit is comparable with); else
%% {escaped, X}, X the lowest commit a path reached instead (not above B), or false.
above(St, B, Roots) ->
    {ok, {_, _, HB}} = hm_mrdt_commits:commit_info(St, B),
    above(St, B, HB, Roots, #{}, none).

above(_, _, _, [], Acc, none) -> {ok, Acc};
above(_, _, _, [], _, {_, X}) -> {escaped, X};
above(St, B, HB, [B | Cs], Acc, Esc) -> above(St, B, HB, Cs, Acc#{B => []}, Esc);
above(St, B, HB, [C | Cs], Acc, Esc) when is_map_key(C, Acc) -> above(St, B, HB, Cs, Acc, Esc);
above(St, B, HB, [C | Cs], Acc, Esc) ->
    case hm_mrdt_commits:commit_info(St, C) of
        {ok, {Ps0, _, H}} when H > HB ->
            case hm_mrdt_ancestry:parents(St, C, Ps0) of
                [] -> false;                     % a root of history (or a graft) not above B
                Ps -> above(St, B, HB, Ps ++ Cs, Acc#{C => Ps}, Esc)
            end;
        {ok, {_, _, H}} when Esc =:= none -> above(St, B, HB, Cs, Acc#{C => []}, {H, C});
        {ok, {_, _, H}} -> above(St, B, HB, Cs, Acc#{C => []}, min(Esc, {H, C}));
        not_found -> false
    end.

plan(St, B, Above, Below, Cache) ->
    {DropCache, KeepCache} = lists:partition(
                               fun({Ls, _}) ->
                                       lists:any(fun(L) -> is_map_key(L, Below) end, Ls)
                               end, Cache),
    Kept = maps:merge(Above, maps:from_list([{V, true} || {_, V} <- KeepCache])),
    DeadCommits = lists:usort(maps:keys(Below) ++
                                  [V || {_, V} <- DropCache, not is_map_key(V, Kept),
                                        hm_mrdt_commits:commit_info(St, V) =/= not_found]),
    %% A kept commit's tree holds blocks created with it (new names) or taken from its
    %% parents' trees, and every path down from a kept commit passes B: so the only old
    %% blocks a kept commit can share with the deleted ones are those of B's tree. A block
    %% lives in the pack of the commit that created it: a deleted commit whose pack holds a
    %% block of B's tree stays (pinned) until a later floor no longer reaches it; the dead
    %% trees that reach it (B's, then) name it again then.
    Live = hm_mrdt_commits:reach_blocks(St, [B]),
    LiveHomes = maps:from_list([{B, true} | [{Home, true} || {Home, _} <- maps:keys(Live)]]),
    Dead = hm_mrdt_commits:reach_blocks(St, DeadCommits),
    Deleted = [C || C <- lists:usort(DeadCommits ++ [Home || {Home, _} <- maps:keys(Dead)]),
                    not is_map_key(C, LiveHomes), not is_map_key(C, Kept)],
    {_, _, HB} = element(2, hm_mrdt_commits:commit_info(St, B)),
    Grafts = [{graft, C} || C <- DeadCommits,
                            hm_mrdt_history:get(St, {graft, C}) =/= not_found],
    Objects = [{obj, H} || H <- dead_objects(St, Dead, maps:keys(Kept))],
    #{floor => B,
      graft => [{{graft, B}, HB}],
      delete => [{cache, Ls} || {Ls, _} <- DropCache] ++ [{block, C} || C <- Deleted]
          ++ Grafts ++ Objects}.

%% The leaves among the blocks of hm_mrdt_commits:reach_blocks/2.
leaves(Reached) -> [R || {R, leaf} <- maps:to_list(Reached)].

%% Objects (values of linked types, `{obj, Hash}') that the values of the deleted commits
%% reach and the values of no kept commit reach. Objects carry no nonce: a kept value may
%% refer to any old one (a log's tail), so what is live is found by walking from the kept
%% values, not from the floor alone. The walk from the kept values stops as soon as it has
%% met every value the deleted commits hold (then everything those reach is kept); only
%% when some is not met is it walked whole. Objects no commit reaches at all (written for a
%% publish not carried out yet) are never deleted: they may be about to be referred to.
dead_objects(St, DeadBlocks, KeptCommits) ->
    case linked_values(St, leaves(DeadBlocks)) of
        [] -> [];
        DeadRoots ->
            LiveRoots = linked_values(
                          St, leaves(hm_mrdt_commits:reach_blocks(St, KeptCommits))),
            Wanted = maps:from_list([{H, true} || {_, H} <- DeadRoots]),
            case walk_objects(St, LiveRoots, #{}, Wanted) of
                {all_met, _} -> [];
                {done, Live} ->
                    {done, Reached} = walk_objects(St, [R || R = {_, H} <- DeadRoots,
                                                             not is_map_key(H, Live)],
                                                  Live, none),
                    [H || H <- maps:keys(Reached), not is_map_key(H, Live)]
            end
    end.

%% `{Type, Hash}' of every value of a linked type held by these leaves.
linked_values(St, Blocks) ->
    lists:usort(
      [{T, hm_mrdt:hash(hm_mrdt_commits:blob(St, E))}
       || R <- Blocks, {T, E} <- maps:values(hm_mrdt_commits:leaf_or_none(St, R)),
          hm_mrdt:is_linked(T)]).

%% Walk objects from `Roots', following each value's references, not entering `Seen0''s
%% keys. `{all_met, Seen}' as soon as every key of `Wanted' was met (`Wanted' `none': never),
%% else `{done, Seen}': every object reached (the objects missing from the store are
%% skipped; new ones are kept by default).
walk_objects(St, Roots, Seen0, Wanted) ->
    Left = case Wanted of
               none -> -1;
               _ -> map_size(Wanted)
           end,
    walk_objects(St, Roots, Seen0, Wanted, Left).

walk_objects(_, _, Seen, _, 0) -> {all_met, Seen};
walk_objects(_, [], Seen, _, _) -> {done, Seen};
walk_objects(St, [{_, H} | Rest], Seen, Wanted, Left) when is_map_key(H, Seen) ->
    walk_objects(St, Rest, Seen, Wanted, Left);
walk_objects(St, [{T, H} | Rest], Seen, Wanted, Left) ->
    Left1 = case Wanted of
                #{H := _} -> Left - 1;
                _ -> Left
            end,
    Next = case hm_mrdt_history:get(St, {obj, H}) of
               {ok, V} -> [{T, R} || R <- hm_mrdt:refs(T, V)];
               not_found -> []
           end,
    walk_objects(St, Next ++ Rest, Seen#{H => true}, Wanted, Left1).

