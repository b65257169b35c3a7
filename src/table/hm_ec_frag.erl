%% @doc Reading an EC table from any node: fragments, copies elsewhere, and hints.
%%
%% An EC table may be split into fragments (a partitioned table: `Tab', `Tab_frag2', ...,
%% each an EC table of its own, held by its own copy holders; see
%% docs/guide/06-partitioned-tables.md), and a node may hold no copy of some of them. A key belongs
%% to fragment `erlang:phash2(Key, F) + 1' for ever. This module is what `async_ec' reads go
%% through for such tables (the location transparency of "RELEASE: Scalable persistent
%% storage for Erlang", "The requirements for scalable and available persistent
%% storage"): a fragment with a copy here is read here, as Mnesia reads any table; one
%% without is read on a reachable copy holder; one none of whose holders is reachable shows
%% what this node holds for it as hints ({@link hm_ec_hints}: writes kept here until a
%% holder is back, Dynamo's hinted handoff). Hints are shown on top
%% of whatever is read, so a node reads its own writes while they wait.
%%
%% Reads spanning the table (`select' with and without a limit, `match_object',
%% `all_keys', `index_read', `index_match_object', folds, `first'/`next'/`last'/`prev',
%% `table_info(Tab, size | memory)') visit the fragments in order, `Tab' first. A table
%% that is not an EC table, and an EC table in one piece with a copy here, never come here:
%% {@link route/1} says `local' and Mnesia reads them directly.
%%
%% A table created with `{foreign_key, {Parent, Attr}}' in its `frag_properties' (Mnesia's
%% option of that name; see {@link hm_partition}) keeps a record in the fragment its
%% attribute `Attr' hashes to, not its key: records of the parent's key `P' and the records
%% naming `P' in `Attr' are in fragments of the same number, held by the same nodes. Such
%% a table is named as `mnesia_frag' names it: `{Tab, ForeignKey}' reaches the one fragment
%% of `ForeignKey' ({@link key_fragments/3}); plain `Tab' with a key visits every fragment,
%% since the key alone does not say where its record is.
%%
%% Invariants: a read never fails because a fragment is unreachable (it shows the hints);
%% a remote read tries each reachable holder in turn; a continuation of {@link select/6}
%% holds only records already read and the fragments still to read.
-module(hm_ec_frag).

-export([route/1, fragments/1, fragments/2, fragment_table/2, fragment_table/3, fragment/2,
         fragment_name/2, record_fragment/3, key_fragments/3,
         fragment_names/2, is_local/1, holders/1, holder_order/3]).
-export([read/5, select/5, select/6, select_cont/3, all_keys/4, index_read/6,
         index_match_object/6, foldl/6, foldr/6, first/3, last/3, next/4, prev/4,
         table_info/4]).
-export_type([route/0]).

-define(REMOTE_TIMEOUT, 10000).
-define(ALL, [{'_', [], ['$_']}]).

-type route() :: local | {frags, atom(), [atom()]}.

%%% ---------------------------------------------------------------- where keys live

%% @doc How `async_ec' reads `Tab' on this node: `local' (Mnesia reads it: not an EC table,
%% or an EC table in one piece with a copy here) or the fragments to visit. `{Tab,
%% ForeignKey}' names the one fragment of `ForeignKey' of a table with a foreign key (and
%% aborts the activity for a partitioned EC table without one, as `mnesia_frag' does).
-spec route(atom() | {atom(), term()}) -> route().
route({Tab, FKey} = Name) when is_atom(Tab) ->
    case hm_ec_registry:ec_options(Tab) of
        {ok, Opts} ->
            case key_fragments(Name, FKey, Opts) of
                {error, Reason} -> mnesia:abort(Reason);
                Frags -> {frags, Tab, Frags}
            end;
        error -> local
    end;
route(Tab) ->
    case hm_ec_registry:ec_options(Tab) of
        {ok, #{frag := #{n_fragments := F}}} when F > 1 ->
            {frags, Tab, fragment_names(Tab, F)};
        {ok, _} ->
            case is_local(Tab) of
                true -> local;
                false -> {frags, Tab, [Tab]}
            end;
        error -> local
    end.

%% @doc The fragments of an EC table (`[Tab]' when it is in one piece).
-spec fragments(atom()) -> [atom()].
fragments(Tab) ->
    case hm_ec_registry:ec_options(Tab) of
        {ok, Opts} -> fragments(Tab, Opts);
        error -> [Tab]
    end.

%% @doc The fragments of EC table `Tab' whose EC options are `Opts'.
-spec fragments(atom(), map()) -> [atom()].
fragments(Tab, #{frag := #{n_fragments := F}}) -> fragment_names(Tab, F);
fragments(Tab, _) -> [Tab].

%% @doc The fragment (a table name) `Key' of `Tab' belongs to.
-spec fragment_table(atom(), term()) -> atom().
fragment_table(Tab, Key) ->
    case hm_ec_registry:ec_options(Tab) of
        {ok, Opts} -> fragment_table(Tab, Key, Opts);
        error -> Tab
    end.

%% @doc The fragment `Key' of EC table `Tab' (EC options `Opts') belongs to.
-spec fragment_table(atom(), term(), map()) -> atom().
fragment_table(Tab, Key, #{frag := #{n_fragments := F}}) when F > 1 ->
    fragment_name(Tab, fragment(Key, F));
fragment_table(Tab, _Key, _) -> Tab.

%% @doc The fragment a record of EC table `Tab' (EC options `Opts') is kept in: that of its
%% key, or for a table with a foreign key that of its foreign-key attribute.
-spec record_fragment(atom(), tuple(), map()) -> atom().
record_fragment(Tab, Rec, #{frag := #{n_fragments := F, foreign_key := {_Parent, Pos}}}) ->
    fragment_name(Tab, fragment(element(Pos, Rec), F));
record_fragment(Tab, Rec, Opts) -> fragment_table(Tab, element(2, Rec), Opts).

%% @doc The fragments where the records of `Key' may be, for a table named `Tab' or, as
%% `mnesia_frag' names a table with a foreign key, `{Tab, ForeignKey}': one fragment, except
%% for plain `Tab' with a foreign key (every fragment). `{Tab, ForeignKey}' on a table
%% without a foreign key is Mnesia's error.
-spec key_fragments(atom() | {atom(), term()}, term(), map()) ->
          [atom()] | {error, {combine_error, atom(), frag_properties, {foreign_key, undefined}}}.
key_fragments({Tab, FKey}, _Key, #{frag := #{n_fragments := F, foreign_key := _}}) ->
    [fragment_name(Tab, fragment(FKey, F))];
key_fragments({Tab, _}, _Key, _Opts) ->
    {error, {combine_error, Tab, frag_properties, {foreign_key, undefined}}};
key_fragments(Tab, _Key, #{frag := #{n_fragments := F, foreign_key := _}}) ->
    fragment_names(Tab, F);
key_fragments(Tab, Key, Opts) -> [fragment_table(Tab, Key, Opts)].

%% @doc The fragment number (1..F) of a key.
-spec fragment(term(), pos_integer()) -> pos_integer().
fragment(Key, F) -> erlang:phash2(Key, F) + 1.

%% @doc The name of fragment `K' of `Tab': `Tab' itself for the first, `Tab_fragK' for the
%% others (Mnesia's own naming of fragments).
-spec fragment_name(atom(), pos_integer()) -> atom().
fragment_name(Tab, 1) -> Tab;
fragment_name(Tab, K) -> list_to_atom(atom_to_list(Tab) ++ "_frag" ++ integer_to_list(K)).

%% @doc The names of all `F' fragments of `Tab', in order.
-spec fragment_names(atom(), pos_integer()) -> [atom()].
fragment_names(Tab, F) -> [fragment_name(Tab, K) || K <- lists:seq(1, F)].

%% @doc Whether this node holds a loaded copy of `Tab'.
-spec is_local(atom()) -> boolean().
is_local(Tab) ->
    try mnesia:table_info(Tab, where_to_read) of
        Where -> Where =:= node()
    catch _:_ -> false
    end.

%% @doc The reachable holders of a copy of `Tab' other than this node, in the order this
%% node tries them (spread over holders: each node starts at another one).
-spec holders(atom()) -> [node()].
holders(Tab) ->
    Holders = try hm_ec_server:copy_holders(Tab)
              catch _:_ -> []
              end,
    holder_order(node(), Holders, nodes()).

%% @doc The holders `Self' tries, pure: those of `Holders' in `Up' (not itself), in an order
%% that differs from node to node so that writes passed on spread over the holders.
-spec holder_order(node(), [node()], [node()]) -> [node()].
holder_order(Self, Holders, Up) ->
    [H || {_, H} <- lists:sort([{erlang:phash2({Self, H}), H} || H <- Holders, H =/= Self,
                                                                 lists:member(H, Up)])].

%%% ---------------------------------------------------------------- reads

-spec read(route(), term(), term(), term(), atom()) -> [tuple()].
read({frags, Tab, Frags}, Tid, Ts, Key, LockKind) ->
    lists:append([read_fragment(Frag, Tid, Ts, Key, LockKind) || Frag <- keyed(Tab, Frags, Key)]).

read_fragment(Frag, Tid, Ts, Key, LockKind) ->
    Read = on_fragment(Frag, fun() -> mnesia:read(Tid, Ts, Frag, Key, LockKind) end,
                       {mnesia, dirty_read, [Frag, Key]}),
    with_hints(Frag, Key, Read).

%% Of the fragments a route visits, those where `Key' may be: the key's own, or for a table
%% with a foreign key all of them (the route of `{Tab, ForeignKey}' visits one).
keyed(Tab, Frags, Key) ->
    case hm_ec_registry:ec_options(Tab) of
        {ok, #{frag := #{foreign_key := _}}} -> Frags;
        {ok, Opts} -> [fragment_table(Tab, Key, Opts)];
        error -> Frags
    end.

-spec select(route(), term(), term(), ets:match_spec(), atom()) -> [term()].
select({frags, _, Frags}, Tid, Ts, Spec, LockKind) ->
    lists:append([select_fragment(F, Tid, Ts, Spec, LockKind) || F <- Frags]).

%% @doc `select' with a limit: chunks of at most `Limit' results, fragment after fragment.
-spec select(route(), term(), term(), ets:match_spec(), pos_integer(), atom()) ->
          {[term()], term()} | '$end_of_table'.
select({frags, _, Frags}, Tid, Ts, Spec, Limit, LockKind) ->
    chunk({hm_ec_frag_cont, [], Frags, Spec, Limit, LockKind}, Tid, Ts).

%% @doc The next chunk of a {@link select/6}.
-spec select_cont(term(), term(), term()) -> {[term()], term()} | '$end_of_table'.
select_cont(Tid, Ts, Cont) -> chunk(Cont, Tid, Ts).

chunk({hm_ec_frag_cont, [], [], _, _, _}, _Tid, _Ts) -> '$end_of_table';
chunk({hm_ec_frag_cont, [], [F | Frags], Spec, Limit, LockKind}, Tid, Ts) ->
    Read = select_fragment(F, Tid, Ts, Spec, LockKind),
    chunk({hm_ec_frag_cont, Read, Frags, Spec, Limit, LockKind}, Tid, Ts);
chunk({hm_ec_frag_cont, Read, Frags, Spec, Limit, LockKind}, _Tid, _Ts) ->
    {Chunk, Rest} = lists:split(min(Limit, length(Read)), Read),
    {Chunk, {hm_ec_frag_cont, Rest, Frags, Spec, Limit, LockKind}}.

select_fragment(Frag, Tid, Ts, Spec, LockKind) ->
    case hm_ec_hints:pending(Frag) of
        [] ->
            on_fragment(Frag, fun() -> mnesia:select(Tid, Ts, Frag, Spec, LockKind) end,
                        {mnesia, dirty_select, [Frag, Spec]});
        _ ->
            %% the fragment's records with the hints on top, then the match
            All = on_fragment(Frag, fun() -> mnesia:select(Tid, Ts, Frag, ?ALL, LockKind) end,
                              {mnesia, dirty_select, [Frag, ?ALL]}),
            ets:match_spec_run(hm_ec_hints:apply_all(Frag, All), ets:match_spec_compile(Spec))
    end.

-spec all_keys(route(), term(), term(), atom()) -> [term()].
all_keys(Route, Tid, Ts, LockKind) ->
    lists:usort([element(2, R) || R <- select(Route, Tid, Ts, ?ALL, LockKind)]).

-spec index_read(route(), term(), term(), term(), term(), atom()) -> [tuple()].
index_read({frags, _, Frags}, Tid, Ts, Key, Attr, LockKind) ->
    lists:append(
      [case hm_ec_hints:pending(F) of
           [] -> on_fragment(F, fun() -> mnesia:index_read(Tid, Ts, F, Key, Attr, LockKind) end,
                             {mnesia, dirty_index_read, [F, Key, Attr]});
           _ -> [R || R <- select_fragment(F, Tid, Ts, ?ALL, LockKind),
                      element(attr_pos(F, Attr), R) =:= Key]
       end || F <- Frags]).

-spec index_match_object(route(), term(), term(), tuple(), term(), atom()) -> [tuple()].
index_match_object({frags, _, Frags}, Tid, Ts, Pat, Attr, LockKind) ->
    lists:append(
      [case hm_ec_hints:pending(F) of
           [] -> on_fragment(F, fun() ->
                                        mnesia:index_match_object(Tid, Ts, F, Pat, Attr,
                                                                  LockKind)
                                end, {mnesia, dirty_index_match_object, [F, Pat, Attr]});
           _ -> select_fragment(F, Tid, Ts, [{Pat, [], ['$_']}], LockKind)
       end || F <- Frags]).

attr_pos(_Tab, Pos) when is_integer(Pos) -> Pos;
attr_pos(Tab, Attr) ->
    Attrs = mnesia:table_info(Tab, attributes),
    length(lists:takewhile(fun(A) -> A =/= Attr end, Attrs)) + 2.

-spec foldl(route(), term(), term(), fun((tuple(), Acc) -> Acc), Acc, atom()) -> Acc.
foldl(Route, Tid, Ts, Fun, Acc, LockKind) ->
    lists:foldl(Fun, Acc, select(Route, Tid, Ts, ?ALL, LockKind)).

-spec foldr(route(), term(), term(), fun((tuple(), Acc) -> Acc), Acc, atom()) -> Acc.
foldr(Route, Tid, Ts, Fun, Acc, LockKind) ->
    lists:foldr(Fun, Acc, select(Route, Tid, Ts, ?ALL, LockKind)).

%% First, next, last, prev: within a fragment in its own order, then on to the next
%% fragment (the order Mnesia's fragmented tables use).
-spec first(route(), term(), term()) -> term().
first({frags, _, Frags}, Tid, Ts) -> first_in(Frags, Tid, Ts, first).

-spec last(route(), term(), term()) -> term().
last({frags, _, Frags}, Tid, Ts) -> first_in(lists:reverse(Frags), Tid, Ts, last).

-spec next(route(), term(), term(), term()) -> term().
next(Route, Tid, Ts, Key) -> step(Route, Tid, Ts, Key, next, first, fun(L) -> L end).

-spec prev(route(), term(), term(), term()) -> term().
prev(Route, Tid, Ts, Key) -> step(Route, Tid, Ts, Key, prev, last, fun lists:reverse/1).

step({frags, Tab, Frags}, Tid, Ts, Key, Dir, Start, Order) ->
    Frag = case keyed(Tab, Frags, Key) of
               [One] -> One;
               Some ->                     % the fragment holding the key, if one does
                   case [F || F <- Some, read_fragment(F, Tid, Ts, Key, read) =/= []] of
                       [Holding | _] -> Holding;
                       [] -> hd(Some)
                   end
           end,
    case iterate(Frag, Tid, Ts, Dir, [Key]) of
        '$end_of_table' ->
            Later = tl(lists:dropwhile(fun(F) -> F =/= Frag end, Order(Frags))),
            first_in(Later, Tid, Ts, Start);
        Next -> Next
    end.

first_in([], _Tid, _Ts, _Dir) -> '$end_of_table';
first_in([F | Frags], Tid, Ts, Dir) ->
    case iterate(F, Tid, Ts, Dir, []) of
        '$end_of_table' -> first_in(Frags, Tid, Ts, Dir);
        Key -> Key
    end.

%% One step of first/last (Args = []) or next/prev (Args = [Key]) in one fragment. A
%% fragment with hints is iterated in the order of its keys, hints included.
iterate(Frag, Tid, Ts, Dir, Args) ->
    case hm_ec_hints:pending(Frag) of
        [] ->
            DirtyDir = list_to_atom("dirty_" ++ atom_to_list(Dir)),
            on_fragment(Frag, fun() -> apply(mnesia, Dir, [Tid, Ts, Frag | Args]) end,
                        {mnesia, DirtyDir, [Frag | Args]}, '$end_of_table');
        _ ->
            Keys0 = lists:usort([element(2, R) || R <- select_fragment(Frag, Tid, Ts, ?ALL,
                                                                        read)]),
            Keys = case Dir of
                       first -> Keys0;
                       next -> Keys0;
                       _ -> lists:reverse(Keys0)
                   end,
            case {Args, Keys} of
                {[], [K | _]} -> K;
                {[Key], _} ->
                    case lists:dropwhile(fun(K) -> K =/= Key end, Keys) of
                        [_, K | _] -> K;
                        _ -> '$end_of_table'
                    end;
                _ -> '$end_of_table'
            end
    end.

%% @doc `table_info' of a table read through fragments: `size' and `memory' summed over
%% them, anything else from `Tab' itself.
-spec table_info(route(), term(), term(), atom()) -> term().
table_info({frags, Tab, Frags}, Tid, Ts, Item) when Item =:= size; Item =:= memory ->
    case Frags of
        [Tab] when Item =:= memory -> mnesia:table_info(Tid, Ts, Tab, Item);
        _ -> lists:sum([on_fragment(F, fun() -> mnesia:table_info(Tid, Ts, F, Item) end,
                                    {mnesia, table_info, [F, Item]}, 0) || F <- Frags])
    end;
table_info({frags, Tab, _}, Tid, Ts, Item) -> mnesia:table_info(Tid, Ts, Tab, Item).

%%% ---------------------------------------------------------------- internal

on_fragment(Frag, Local, Remote) -> on_fragment(Frag, Local, Remote, []).

%% Read `Frag' here when it is here, else on the first reachable holder that answers; with
%% none, `Nothing' (the hints, if any, are added by the caller).
on_fragment(Frag, Local, {M, F, A}, Nothing) ->
    case is_local(Frag) of
        true -> Local();
        false -> remote(holders(Frag), M, F, A, Nothing)
    end.

remote([], _M, _F, _A, Nothing) -> Nothing;
remote([H | Hs], M, F, A, Nothing) ->
    try erpc:call(H, M, F, A, ?REMOTE_TIMEOUT)
    catch _:_ -> remote(Hs, M, F, A, Nothing)
    end.

with_hints(Frag, Key, Read) ->
    case hm_ec_hints:pending(Frag) of
        [] -> Read;
        _ -> hm_ec_hints:apply_key(Frag, Key, Read)
    end.
