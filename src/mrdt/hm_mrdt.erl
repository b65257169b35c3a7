%% @doc Mergeable types: the behaviour every value stored through a session implements, and
%% the calls the history layer makes on a type (after "Banyan: Coordination-free Distributed
%% Transactions over Mergeable Types", section 2.1, and its reference to mergeable replicated
%% data types).
%%
%% A type is a module with a three-way merge: `merge(LCA, A, B)' is given the value at the
%% lowest common ancestor of two versions (`none' when the key did not exist there, or the
%% versions share no history) and the two versions, and returns `{ok, Merged}' or
%% `{conflict, Reason}'. Every shipped type satisfies two laws, checked by PropEr
%% (test/hm_mrdt_prop.erl):
%% <ul>
%% <li>merging with the LCA is the identity: `merge(L, L, B) =:= {ok, B}' and
%% `merge(L, A, L) =:= {ok, A}';</li>
%% <li>merge is commutative in its two versions: `merge(L, A, B) =:= merge(L, B, A)'.</li>
%% </ul>
%%
%% Optional callbacks say what a type needs to be stored:
%% <ul>
%% <li>`update(Old, Arg)': the value a session write of `Arg' stores, given the value the
%% session sees (`none' if the key is absent). Default: `Arg' itself (the write replaces the
%% value). Logs use it to append; sets to normalise.</li>
%% <li>`refs(Value)': the hashes of other values of the same type that `Value' refers to
%% (linked structures: the linked log). Such values are also stored as objects addressed by
%% {@link hash/1}, kept as long as a live value refers to them. Default: `[]'.</li>
%% <li>`read(Value, Fetch)': what a session read returns for a stored value; `Fetch(Hash)'
%% returns `{ok, Value}' or `not_found' for referenced values. Default: `Value'.</li>
%% <li>`valid(Arg)': whether a write of `Arg' is allowed. Default: `true'.</li>
%% </ul>
-module(hm_mrdt).

-export([merge/4, update/3, refs/2, read/3, valid/2, is_type/1, is_linked/1, hash/1]).
-export_type([value/0, lca/0, result/0, hash/0, fetch/0]).

-type value() :: term().
-type lca() :: value() | none.
-type result() :: {ok, value()} | {conflict, term()}.
-type hash() :: binary().
-type fetch() :: fun((hash()) -> {ok, value()} | not_found).

-callback merge(LCA :: lca(), A :: value(), B :: value()) -> result().
-callback update(Old :: value() | none, Arg :: term()) -> value().
-callback refs(value()) -> [hash()].
-callback read(value(), fetch()) -> term().
-callback valid(Arg :: term()) -> boolean().
-optional_callbacks([update/2, refs/1, read/2, valid/1]).

%% @doc `Type:merge(LCA, A, B)', with a crash or a bad return of the type turned into
%% `{conflict, {merge_failed, Type, Reason}}'.
-spec merge(module(), lca(), value(), value()) -> result().
merge(Type, LCA, A, B) ->
    try Type:merge(LCA, A, B) of
        {ok, _} = Ok -> Ok;
        {conflict, _} = C -> C;
        Other -> {conflict, {merge_failed, Type, {bad_return, Other}}}
    catch Class:Reason -> {conflict, {merge_failed, Type, {Class, Reason}}}
    end.

%% @doc The value a write of `Arg' stores (see the module doc).
-spec update(module(), value() | none, term()) -> value().
update(Type, Old, Arg) ->
    case erlang:function_exported(Type, update, 2) of
        true -> Type:update(Old, Arg);
        false -> Arg
    end.

%% @doc The hashes of the values `Value' refers to.
-spec refs(module(), value()) -> [hash()].
refs(Type, Value) ->
    case erlang:function_exported(Type, refs, 1) of
        true -> Type:refs(Value);
        false -> []
    end.

%% @doc Whether values of `Type' may refer to others (it exports `refs/1'): they are also
%% stored as objects addressed by {@link hash/1}.
-spec is_linked(module()) -> boolean().
is_linked(Type) -> erlang:function_exported(Type, refs, 1).

%% @doc What a read of `Value' returns.
-spec read(module(), value(), fetch()) -> term().
read(Type, Value, Fetch) ->
    case erlang:function_exported(Type, read, 2) of
        true -> Type:read(Value, Fetch);
        false -> Value
    end.

%% @doc Whether `Type' accepts a write of `Arg'.
-spec valid(module(), term()) -> boolean().
valid(Type, Arg) ->
    case erlang:function_exported(Type, valid, 1) of
        true -> Type:valid(Arg) =:= true;
        false -> true
    end.

%% @doc Whether `Type' is a loadable module implementing this behaviour (it exports
%% `merge/3').
-spec is_type(term()) -> boolean().
is_type(Type) when is_atom(Type) ->
    _ = code:ensure_loaded(Type),
    erlang:function_exported(Type, merge, 3);
is_type(_) -> false.

%% @doc The content address of a term: SHA-256 of its external format.
-spec hash(term()) -> hash().
hash(Term) -> crypto:hash(sha256, term_to_binary(Term)).
