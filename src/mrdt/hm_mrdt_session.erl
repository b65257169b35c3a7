%% @doc A session's steps, as pure functions over the session's state and a
%% {@link hm_mrdt_history:store()} (after "Banyan: Coordination-free Distributed Transactions
%% over Mergeable Types", section 3: sessions with `publish' and `refresh').
%%
%% A session sees one commit of its node's public branch, its base, plus its own writes since
%% its last publish or refresh (pending). Reads see pending writes first, then the base. A
%% publish hands the pending writes and the base to the node, which squashes them into one
%% commit on its public branch ({@link hm_mrdt_node:publish/4}); the session moves to the
%% result ({@link published/2}). A refresh moves the session to a newer commit of the
%% public branch and re-applies its pending writes with a three-way merge per key
%% ({@link rebase/3}).
%%
%% Invariants: the base is always a commit of this node's public branch (or `none'), so it is
%% an ancestor of the branch's head; pending writes are invisible outside the session until a
%% publish makes all of them visible in one commit.
-module(hm_mrdt_session).

-export([new/2, base/1, pending/1, objects/1, read/3, write/5, published/2, rebase/3]).
-export_type([session/0]).

-opaque session() :: #{id := term(), base := hm_mrdt_history:commit(),
                       pending := #{term() => {module(), term()}},
                       objs := #{hm_mrdt:hash() => term()}}.

%% @doc A session named `Id' (unique on its node) starting at commit `Base'.
-spec new(term(), hm_mrdt_history:commit()) -> session().
new(Id, Base) -> #{id => Id, base => Base, pending => #{}, objs => #{}}.

-spec base(session()) -> hm_mrdt_history:commit().
base(#{base := B}) -> B.

-spec pending(session()) -> #{term() => {module(), term()}}.
pending(#{pending := P}) -> P.

%% @doc The values of linked types (see {@link hm_mrdt:refs/2}) that pending writes replaced:
%% the pending values refer to them by hash, so a publish must store them, as
%% `{obj, Hash}' records, before the commit that holds the pending values.
-spec objects(session()) -> [{{obj, hm_mrdt:hash()}, term()}].
objects(#{objs := Os}) -> [{{obj, H}, V} || {H, V} <- lists:sort(maps:to_list(Os))].

%% A linked value about to be replaced by one that refers to it, kept for the publish.
keep(S = #{objs := Os}, T, V) ->
    case hm_mrdt:is_linked(T) of
        true -> S#{objs := Os#{hm_mrdt:hash(V) => V}};
        false -> S
    end.

%% What the session sees at Key: {ok, Type, StoredValue} | not_found.
visible(#{pending := P, base := B}, St, Key) ->
    case P of
        #{Key := {T, V}} -> {ok, T, V};
        _ -> hm_mrdt_commits:read(St, hm_mrdt_commits:tree_of(St, B), Key)
    end.

%% @doc Read a key: `{ok, Value}' (what the type's read shows) or `not_found'.
-spec read(session(), hm_mrdt_history:store(), term()) -> {ok, term()} | not_found.
read(S, St, Key) ->
    case visible(S, St, Key) of
        {ok, T, V} ->
            Os = maps:get(objs, S),
            Fetch = fun(H) ->
                            case Os of
                                #{H := O} -> {ok, O};
                                _ -> hm_mrdt_history:get(St, {obj, H})
                            end
                    end,
            {ok, hm_mrdt:read(T, V, Fetch)};
        not_found -> not_found
    end.

%% @doc Write `Arg' to a key with type `Type' (the stored value is the type's update of what
%% the session sees). Errors: `{bad_type, Type}' (not a module implementing
%% {@link hm_mrdt}), `{bad_value, Type, Arg}', `{type_mismatch, Key, Existing}' (the key
%% holds a value of another type).
-spec write(session(), hm_mrdt_history:store(), term(), module(), term()) ->
          {ok, session()} | {error, term()}.
write(S = #{pending := P}, St, Key, Type, Arg) ->
    case hm_mrdt:is_type(Type) of
        false -> {error, {bad_type, Type}};
        true ->
            case {hm_mrdt:valid(Type, Arg), visible(S, St, Key)} of
                {false, _} -> {error, {bad_value, Type, Arg}};
                {true, {ok, T, _}} when T =/= Type -> {error, {type_mismatch, Key, T}};
                {true, {ok, _, Old}} ->
                    S1 = case P of
                             #{Key := _} -> keep(S, Type, Old);
                             _ -> S
                         end,
                    {ok, S1#{pending := P#{Key => {Type, hm_mrdt:update(Type, Old, Arg)}}}};
                {true, not_found} -> {ok, S#{pending := P#{Key => {Type, hm_mrdt:update(Type, none, Arg)}}}}
            end
    end.

%% @doc After a publish: the session sees the public branch's new head, nothing pending.
-spec published(session(), hm_mrdt_history:commit()) -> session().
published(S, Head) -> S#{base := Head, pending := #{}, objs := #{}}.

%% @doc A refresh's last step: move to `Head' (a descendant of the base) and re-apply each
%% pending write as the three-way merge of the key at the old base, at `Head' and in the
%% session ({@link hm_mrdt_merge:merge_writes/4}). `{conflict, {Key, Reason}}' leaves the
%% session as it was.
-spec rebase(session(), hm_mrdt_history:store(), hm_mrdt_history:commit()) ->
          {ok, session()} | {conflict, term()}.
rebase(S = #{base := Head}, _, Head) -> {ok, S};
rebase(S = #{base := B, pending := P}, St, Head) ->
    case hm_mrdt_merge:merge_writes(St, hm_mrdt_commits:tree_of(St, B),
                                    hm_mrdt_commits:tree_of(St, Head), P) of
        {ok, P1} ->
            %% a merged linked value refers to the pending one it replaced
            S1 = maps:fold(fun(K, {T, V}, Acc) ->
                                   case maps:get(K, P1) of
                                       {T, V} -> Acc;
                                       _ -> keep(Acc, T, V)
                                   end
                           end, S, P),
            {ok, S1#{base := Head, pending := P1}};
        {conflict, _} = C -> C
    end.
