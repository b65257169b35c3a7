%% @doc Where a repository's history lives at run time: one EC table (`pawset', add-wins) per
%% repository, with a copy on each of the repository's nodes (after "Banyan:
%% Coordination-free Distributed Transactions over Mergeable Types", section 4.2, where the
%% block and tag stores are tables of an eventually consistent store). Records are
%% `{Tab, Key, Value}' with the keys of {@link hm_mrdt_history} plus `{branch, Node}'.
%%
%% Blocks are immutable and content-addressed, so concurrent writes of one key always carry
%% the same value and add-wins is exactly right: a block is deleted only by history
%% collection, after no root needs it. Branch records have one writer each (their node).
%% Reads are local (the node's copy); writes go through the EC access module, so they return
%% once applied locally and reach the other copies by causal broadcast, in the order written.
-module(hm_mrdt_store).

-export([table/1, create/2, exists/1, nodes/1, fetch/1, store/2, reader/1, write/3, records/2,
         cache/1, size/1, unpacked/0, new_unpacked/0, keep_unpacked/2, purge_unpacked/1]).

-define(UNPACKED, hm_mrdt_unpacked).

%% @doc The EC table of repository `Repo'.
-spec table(atom()) -> atom().
table(Repo) -> list_to_atom("hm_mrdt_" ++ atom_to_list(Repo)).

%% @doc Create the table of `Repo' with copies of `Storage' (`ram_copies' or
%% `disc_copies') on `Nodes'.
-spec create(atom(), #{nodes := [node()], storage := ram_copies | disc_copies}) ->
          ok | {error, term()}.
create(Repo, #{nodes := Nodes, storage := Storage}) ->
    case hm_ec_registry:create_table(table(Repo), [{type, pawset}, {attributes, [key, value]},
                                                   {Storage, Nodes}]) of
        {atomic, ok} -> ok;
        {aborted, {already_exists, _}} -> {error, {already_exists, Repo}};
        {aborted, R} -> {error, R}
    end.

%% @doc Whether `Repo' has a table, with a copy on this node.
-spec exists(atom()) -> boolean().
exists(Repo) ->
    try lists:member(table(Repo), mnesia:system_info(local_tables))
    catch exit:_ -> false
    end.

%% @doc The nodes holding a copy of `Repo'.
-spec nodes(atom()) -> [node()].
nodes(Repo) ->
    Tab = table(Repo),
    lists:usort(mnesia:table_info(Tab, ram_copies) ++ mnesia:table_info(Tab, disc_copies)).

%% @doc A read-only view of the local copy. A repository is only used where it has a copy,
%% in RAM or on disc, and both keep their records in an ETS table named after the table:
%% reads go to it directly, without `mnesia:dirty_read/2''s checks of where to read (they
%% were a third of the cost of reading history). A table that is gone exits as Mnesia does.
%% Also answers `{member, Key}' and `{block, Commit, Hash}' (see
%% {@link hm_mrdt_history:store/1}): a leaf or blob is read from the node's table of
%% unpacked blocks ({@link unpacked/0}); on a miss, the commit's record is read once and
%% its whole pack unpacked there, so that reading one leaf does not copy every block its
%% commit created each time.
-spec fetch(atom()) -> fun((term()) -> {ok, term()} | not_found).
fetch(Tab) ->
    fun({member, K}) ->
            try {ok, ets:member(Tab, K)}
            catch error:badarg -> exit({aborted, {no_exists, Tab}})
            end;
       ({block, C, H}) -> unpacked(Tab, C, H);
       ({head, C}) -> unpacked(Tab, C, head);
       (K) ->
            case lookup(Tab, K) of
                [{_, _, V} | _] -> {ok, V};
                [] -> not_found
            end
    end.

unpacked(Tab, C, H) ->
    try ets:lookup(?UNPACKED, {Tab, C, H}) of
        [{_, B}] -> {ok, B};
        [] -> unpack(Tab, C, H, true)
    catch error:badarg -> unpack(Tab, C, H, false)
    end.

unpack(Tab, C, H, Keep) ->
    case lookup(Tab, {block, C}) of
        [{_, _, {commit, _, _, _, _} = Stored} | _] ->
            {commit, Ps, T, Ht, Pack} = Rec = hm_mrdt_history:open_commit(Stored),
            _ = Keep andalso keep_unpacked(Tab, C, Rec),
            case {H, Pack} of
                {head, _} -> {ok, {commit, Ps, T, Ht}};
                {_, #{H := B}} -> {ok, B};
                _ -> not_found
            end;
        _ -> not_found
    end.

keep_unpacked(Tab, C, {commit, Ps, T, Ht, Pack}) ->
    ets:insert(?UNPACKED, [{{Tab, C, head}, {commit, Ps, T, Ht}} |
                           [{{Tab, C, Hi}, Bi} || {Hi, Bi} <- maps:to_list(Pack)]]).

%% @doc Unpack the commits this node writes (`{Commit, Record}', records opened, from
%% {@link hm_mrdt_history:new_commits/1}) into the node's table of unpacked blocks, so that
%% its readers need not decode them out of the repository's table.
-spec keep_unpacked(atom(), [{hm_mrdt:hash(), tuple()}]) -> ok.
keep_unpacked(Tab, Commits) ->
    try
        _ = [keep_unpacked(Tab, C, Rec) || {C, {commit, _, _, _, _} = Rec} <- Commits],
        ok
    catch error:badarg -> ok
    end.

has_commit(Tab, C) ->
    try ets:member(Tab, {block, C})
    catch error:badarg -> false                 % the repository's table is gone
    end.

%% @doc The node's table of blocks unpacked from commit records: `{{Tab, Commit, Hash},
%% Block}', and `{{Tab, Commit, head}, {commit, Parents, Tree, Height}}'.
-spec unpacked() -> atom().
unpacked() -> ?UNPACKED.

%% @doc Create the node's table of unpacked blocks ({@link unpacked/0}); the calling process
%% owns it. An ordered set: a repository's blocks, and a commit's, are one range of keys,
%% which {@link purge_unpacked/1} visits without scanning the other repositories' blocks or
%% the other commits'.
-spec new_unpacked() -> ets:tid() | atom().
new_unpacked() ->
    ets:new(?UNPACKED, [ordered_set, public, named_table, {read_concurrency, true}]).

%% @doc Drop the unpacked blocks of `Tab' whose commit's record is gone (collected), or all
%% of them if `Tab' is gone.
-spec purge_unpacked(atom()) -> ok.
purge_unpacked(Tab) ->
    try
        Cs = lists:usort(ets:select(?UNPACKED, [{{{Tab, '$1', '_'}, '_'}, [], ['$1']}])),
        Gone = [C || C <- Cs, not has_commit(Tab, C)],
        _ = [ets:match_delete(?UNPACKED, {{Tab, C, '_'}, '_'}) || C <- Gone],
        ok
    catch error:badarg -> ok
    end.

lookup(Tab, K) ->
    try ets:lookup(Tab, K)
    catch error:badarg -> exit({aborted, {no_exists, Tab}})
    end.

%% @doc A {@link hm_mrdt_history:store()} over the local copy of `Tab', knowing the highest
%% floor collected by any of `Nodes'.
-spec store(atom(), [node()]) -> hm_mrdt_history:store().
store(Tab, Nodes) ->
    Fetch = fetch(Tab),
    hm_mrdt_history:set_max_graft(hm_mrdt_history:store(Fetch),
                                  hm_mrdt_node:max_graft(Fetch, Nodes)).

%% @doc A {@link hm_mrdt_history:store()} over the local copy of `Tab', for reads and new
%% blocks (no floor).
-spec reader(atom()) -> hm_mrdt_history:store().
reader(Tab) -> hm_mrdt_history:store(fetch(Tab)).

%% @doc Write `Puts' in order, then delete `Deletes', as EC operations.
-spec write(atom(), [{term(), term()}], [term()]) -> ok.
write(_, [], []) -> ok;
write(Tab, Puts, Deletes) ->
    mnesia:activity(async_dirty,
                    fun() ->
                            [ok = mnesia:write({Tab, K, V}) || {K, V} <- Puts],
                            [ok = mnesia:delete({Tab, K}) || K <- Deletes],
                            ok
                    end, [], hm_ec_access).

%% @doc The branch records of `Nodes' in the local copy: node to record.
-spec records(atom(), [node()]) -> #{node() => hm_mrdt_node:branch_record()}.
records(Tab, Nodes) ->
    Fetch = fetch(Tab),
    maps:from_list([{Nd, R} || Nd <- Nodes, {ok, R} <- [Fetch({branch, Nd})]]).

%% @doc Every cache entry in the local copy.
-spec cache(atom()) -> [{[hm_mrdt:hash()], hm_mrdt:hash()}].
cache(Tab) ->
    mnesia:dirty_select(Tab, [{{'_', {cache, '$1'}, '$2'}, [], [{{'$1', '$2'}}]}]).

%% @doc Records and words of memory of the local copy, counting the bytes of the binaries
%% that hold commits' trees and packs (kept outside the table's own memory).
-spec size(atom()) -> #{records := non_neg_integer(), words := non_neg_integer()}.
size(Tab) ->
    Bytes = ets:foldl(fun({_, _, {commit, _, T, _, P}}, A) when is_binary(T), is_binary(P) ->
                              A + byte_size(T) + byte_size(P);
                         (_, A) -> A
                      end, 0, Tab),
    #{records => mnesia:table_info(Tab, size),
      words => mnesia:table_info(Tab, memory) + Bytes div erlang:system_info(wordsize)}.
