%% @doc The blob log of "Banyan: Coordination-free Distributed Transactions over Mergeable
%% Types", section 5.3: a log stored as one value, the list of its entries newest first. A
%% write appends one entry (use `{Timestamp, Message}' entries so that term order is time
%% order). Appending rewrites the whole value, so an append costs the length of the log; the
%% linked log ({@link hm_mrdt_linked_log}) is the constant-time variant.
%%
%% Merge: the entries each version added since the LCA (the LCA is a suffix of both), sorted
%% newest first (descending term order), in front of the LCA's entries.
-module(hm_mrdt_blob_log).
-behaviour(hm_mrdt).

-export([merge/3, update/2]).

%% @doc Merge two logs that both extend `LCA' (see the module doc); versions that do not
%% extend it conflict with `{conflict, not_an_extension}'.
-spec merge([term()] | none, [term()], [term()]) -> hm_mrdt:result().
merge(none, A, B) -> merge([], A, B);
merge(LCA, A, B) ->
    case {added(LCA, A), added(LCA, B)} of
        {{ok, NA}, {ok, NB}} ->
            {ok, lists:sort(fun(X, Y) -> X >= Y end, NA ++ NB) ++ LCA};
        _ -> {conflict, not_an_extension}
    end.

added(LCA, V) ->
    N = length(V) - length(LCA),
    case N >= 0 andalso lists:nthtail(N, V) =:= LCA of
        true -> {ok, lists:sublist(V, N)};
        false -> error
    end.

%% @doc A write appends the entry.
-spec update([term()] | none, term()) -> [term()].
update(none, Entry) -> [Entry];
update(Log, Entry) -> [Entry | Log].
