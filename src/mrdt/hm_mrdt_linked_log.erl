%% @doc The linked log of "Banyan: Coordination-free Distributed Transactions over Mergeable
%% Types", section 5.3 (Fig. 10): each value is one node that refers to earlier values by
%% hash, so appending and merging are both constant time, and versions share their tails in
%% the store.
%%
%% A value is `empty', `{entry, Entry, Prev}' (an appended entry and the hash of the value
%% before it, or `nil') or `{merge, [H1, H2]}' (the sorted hashes of two merged values). A
%% write appends one entry; a read returns every entry reachable, newest first (descending
%% term order: use `{Timestamp, Message}' entries). Merge: if one version is the LCA, the
%% other; if both are equal, either; else a `merge' node referring to both.
%% Values are stored as objects addressed by {@link hm_mrdt:hash/1} (see {@link refs/1}).
%% History collection ({@link hm_mrdt_collect:gc_plan/3}) deletes a value once only
%% collected commits reach it; since every value refers to the one it extended, a log that
%% only grows keeps all of its values.
-module(hm_mrdt_linked_log).
-behaviour(hm_mrdt).

-export([merge/3, update/2, refs/1, read/2]).
-export_type([log/0]).

-type log() :: empty | {entry, term(), hm_mrdt:hash() | nil} | {merge, [hm_mrdt:hash()]}.

%% @doc Constant-time merge (see the module doc).
-spec merge(log() | none, log(), log()) -> {ok, log()}.
merge(L, L, B) -> {ok, B};
merge(L, A, L) -> {ok, A};
merge(_, A, A) -> {ok, A};
merge(_, A, B) -> {ok, {merge, lists:sort([hm_mrdt:hash(A), hm_mrdt:hash(B)])}}.

%% @doc A write appends `Entry' in front of the current value.
-spec update(log() | none, term()) -> log().
update(none, Entry) -> {entry, Entry, nil};
update(empty, Entry) -> {entry, Entry, nil};
update(Log, Entry) -> {entry, Entry, hm_mrdt:hash(Log)}.

%% @doc The values a value refers to.
-spec refs(log()) -> [hm_mrdt:hash()].
refs({entry, _, nil}) -> [];
refs({entry, _, H}) -> [H];
refs({merge, Hs}) -> Hs;
refs(empty) -> [].

%% @doc Every entry reachable from `Log', newest first; `{error, {missing, Hash}}' if a value
%% it refers to is not in the store.
-spec read(log(), hm_mrdt:fetch()) -> [term()] | {error, {missing, hm_mrdt:hash()}}.
read(Log, Fetch) ->
    try collect([Log], Fetch, #{}, []) of
        Entries -> lists:sort(fun(X, Y) -> X >= Y end, Entries)
    catch throw:{missing, H} -> {error, {missing, H}}
    end.

collect([], _, _, Acc) -> Acc;
collect([V | Vs], Fetch, Seen, Acc) ->
    H = hm_mrdt:hash(V),
    case Seen of
        #{H := _} -> collect(Vs, Fetch, Seen, Acc);
        _ ->
            Next = [fetch(R, Fetch) || R <- refs(V)],
            Acc1 = case V of
                       {entry, E, _} -> [E | Acc];
                       _ -> Acc
                   end,
            collect(Next ++ Vs, Fetch, Seen#{H => true}, Acc1)
    end.

fetch(H, Fetch) ->
    case Fetch(H) of
        {ok, V} -> V;
        not_found -> throw({missing, H})
    end.
