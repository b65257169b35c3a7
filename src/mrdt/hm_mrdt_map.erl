%% @doc A mergeable map of mergeable values (after "Banyan: Coordination-free Distributed
%% Transactions over Mergeable Types", section 2.1: values are composed of mergeable types):
%% `#{Key => {Type, Value}}', each `Type' a module implementing {@link hm_mrdt}.
%%
%% Three-way merge, key by key: a key both versions hold merges with its type (its LCA value,
%% or `none'); a key one version changed and the other left as in the LCA takes the change; a
%% key one version removed and the other left unchanged is removed; a key removed on one side
%% and changed on the other keeps the change. Two versions that give a key different types
%% conflict (`{conflict, {type_mismatch, Key}}'), as does any conflict of a value's merge.
-module(hm_mrdt_map).
-behaviour(hm_mrdt).

-export([merge/3, valid/1]).

-type entry() :: {module(), term()}.

%% @doc Merge key by key (see the module doc).
-spec merge(#{term() => entry()} | none, #{term() => entry()}, #{term() => entry()}) ->
          hm_mrdt:result().
merge(none, A, B) -> merge(#{}, A, B);
merge(LCA, A, B) ->
    Keys = lists:usort(maps:keys(LCA) ++ maps:keys(A) ++ maps:keys(B)),
    merge_keys(Keys, LCA, A, B, #{}).

merge_keys([], _, _, _, Acc) -> {ok, Acc};
merge_keys([K | Ks], L, A, B, Acc) ->
    case merge_key(K, maps:find(K, L), maps:find(K, A), maps:find(K, B)) of
        {ok, none} -> merge_keys(Ks, L, A, B, Acc);
        {ok, V} -> merge_keys(Ks, L, A, B, Acc#{K => V});
        {conflict, _} = C -> C
    end.

merge_key(_, X, X, Y) -> {ok, found(Y)};
merge_key(_, X, Y, X) -> {ok, found(Y)};
merge_key(_, _, {ok, V}, error) -> {ok, V};
merge_key(_, _, error, {ok, V}) -> {ok, V};
merge_key(K, L, {ok, {T, VA}}, {ok, {T, VB}}) ->
    LV = case L of
             {ok, {T, V0}} -> V0;
             _ -> none
         end,
    case hm_mrdt:merge(T, LV, VA, VB) of
        {ok, V} -> {ok, {T, V}};
        {conflict, R} -> {conflict, {K, R}}
    end;
merge_key(K, _, {ok, _}, {ok, _}) -> {conflict, {type_mismatch, K}}.

found({ok, V}) -> V;
found(error) -> none.

%% @doc A map is written as a map of `{Type, Value}' entries.
-spec valid(term()) -> boolean().
valid(M) when is_map(M) ->
    lists:all(fun({T, V}) -> hm_mrdt:is_type(T) andalso hm_mrdt:valid(T, V);
                 (_) -> false
              end, maps:values(M));
valid(_) -> false.
