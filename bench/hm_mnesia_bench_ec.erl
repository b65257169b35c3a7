%% @doc The EC side of Mnesia's own bench program (`lib/mnesia/examples/bench', the program
%% the paper "Hypermnesia: Eventual Consistency in Mnesia" ran in §5) when `make bench-mnesia'
%% runs it under `async_ec': its access module and its table creation.
%%
%% The program runs every request as `mnesia:activity(Activity, Fun, Args, mnesia_frag)' and
%% names tables the way `mnesia_frag' does, `{Tab, ForeignKey}', so that a request reaches
%% the fragment its foreign key hashes to. Patched (scripts/mnesia-examples) to take the
%% access module from a macro, it is given this module, under `async_dirty': exactly what
%% `hypermnesia:async_ec/2' runs (`mnesia:activity(async_dirty, Fun, Args, hm_ec_access)'),
%% after `{Tab, ForeignKey}' is read as `Tab'. That is only right for a table of one
%% fragment (the runs with `n_fragments' 1). The run on partitioned EC tables needs none of
%% this: its access module is `hm_ec_access' itself, which reads `mnesia_frag''s names.
%%
%% {@link create_table/2} is the patched program's table creation: Mnesia's definition with
%% `frag_properties' of one fragment (`n_ram_copies' or `n_disc_copies' replicas from
%% `node_pool') becomes a `pawset' EC table with that many copies on the pool's first nodes;
%% with more fragments, a partitioned `pawset' EC table with the same `frag_properties'
%% (its `foreign_key' included).
-module(hm_mnesia_bench_ec).

-export([create_table/2]).
-export([lock/4, write/5, delete/5, delete_object/5, read/5, match_object/5, all_keys/4,
         index_match_object/6, index_read/6, table_info/4, select/5, select/6, select_cont/3,
         first/3, last/3, next/4, prev/4, foldl/6, foldr/6, clear_table/4]).

%% @doc `hypermnesia:create_table/2' for a definition of the bench program: `{type, pawset}'
%% added, `frag_properties' of one fragment replaced by the copies it places, of more
%% fragments kept (a partitioned EC table).
-spec create_table(atom(), [tuple()]) -> {atomic, ok} | {aborted, term()}.
create_table(Tab, Def) ->
    case lists:keyfind(frag_properties, 1, Def) of
        false -> hypermnesia:create_table(Tab, [{type, pawset} | Def]);
        {_, Props} ->
            case proplists:get_value(n_fragments, Props, 1) of
                1 ->
                    Pool = proplists:get_value(node_pool, Props, [node()]),
                    Copies = [{copies(Type), lists:sublist(Pool, N)}
                              || {Type, N} <- Props,
                                 lists:member(Type, [n_ram_copies, n_disc_copies]), N > 0],
                    Rest = lists:keydelete(frag_properties, 1, Def),
                    hypermnesia:create_table(Tab, [{type, pawset} | Copies ++ Rest]);
                _ ->
                    hypermnesia:create_table(Tab, [{type, pawset} | Def])
            end
    end.

copies(n_ram_copies) -> ram_copies;
copies(n_disc_copies) -> disc_copies.

%% `{Tab, ForeignKey}' (mnesia_frag's way to name the fragment of a foreign key) is `Tab'.
tab({Tab, _ForeignKey}) when is_atom(Tab) -> Tab;
tab(Tab) -> Tab.

lock_item({table, Tab}) -> {table, tab(Tab)};
lock_item({record, Tab, Key}) -> {record, tab(Tab), Key};
lock_item(Item) -> Item.

%%% mnesia_access callbacks: hm_ec_access's, after tab/1

-spec lock(term(), term(), term(), atom()) -> term().
lock(Tid, Ts, Item, Kind) -> hm_ec_access:lock(Tid, Ts, lock_item(Item), Kind).
-spec write(term(), term(), term(), tuple(), atom()) -> ok.
write(Tid, Ts, Tab, Val, Kind) -> hm_ec_access:write(Tid, Ts, tab(Tab), Val, Kind).
-spec delete(term(), term(), term(), term(), atom()) -> ok.
delete(Tid, Ts, Tab, Key, Kind) -> hm_ec_access:delete(Tid, Ts, tab(Tab), Key, Kind).
-spec delete_object(term(), term(), term(), tuple(), atom()) -> ok.
delete_object(Tid, Ts, Tab, Val, Kind) -> hm_ec_access:delete_object(Tid, Ts, tab(Tab), Val, Kind).
-spec read(term(), term(), term(), term(), atom()) -> [tuple()].
read(Tid, Ts, Tab, Key, Kind) -> hm_ec_access:read(Tid, Ts, tab(Tab), Key, Kind).
-spec match_object(term(), term(), term(), tuple(), atom()) -> [tuple()].
match_object(Tid, Ts, Tab, Pat, Kind) -> hm_ec_access:match_object(Tid, Ts, tab(Tab), Pat, Kind).
-spec all_keys(term(), term(), term(), atom()) -> [term()].
all_keys(Tid, Ts, Tab, Kind) -> hm_ec_access:all_keys(Tid, Ts, tab(Tab), Kind).
-spec index_match_object(term(), term(), term(), tuple(), term(), atom()) -> [tuple()].
index_match_object(Tid, Ts, Tab, Pat, Attr, Kind) ->
    hm_ec_access:index_match_object(Tid, Ts, tab(Tab), Pat, Attr, Kind).
-spec index_read(term(), term(), term(), term(), term(), atom()) -> [tuple()].
index_read(Tid, Ts, Tab, Key, Attr, Kind) ->
    hm_ec_access:index_read(Tid, Ts, tab(Tab), Key, Attr, Kind).
-spec table_info(term(), term(), term(), atom()) -> term().
table_info(Tid, Ts, Tab, Item) -> hm_ec_access:table_info(Tid, Ts, tab(Tab), Item).
-spec select(term(), term(), term(), term(), atom()) -> [term()].
select(Tid, Ts, Tab, Spec, Kind) -> hm_ec_access:select(Tid, Ts, tab(Tab), Spec, Kind).
-spec select(term(), term(), term(), term(), pos_integer(), atom()) -> term().
select(Tid, Ts, Tab, Spec, Limit, Kind) ->
    hm_ec_access:select(Tid, Ts, tab(Tab), Spec, Limit, Kind).
-spec select_cont(term(), term(), term()) -> term().
select_cont(Tid, Ts, Cont) -> hm_ec_access:select_cont(Tid, Ts, Cont).
-spec first(term(), term(), term()) -> term().
first(Tid, Ts, Tab) -> hm_ec_access:first(Tid, Ts, tab(Tab)).
-spec last(term(), term(), term()) -> term().
last(Tid, Ts, Tab) -> hm_ec_access:last(Tid, Ts, tab(Tab)).
-spec next(term(), term(), term(), term()) -> term().
next(Tid, Ts, Tab, Key) -> hm_ec_access:next(Tid, Ts, tab(Tab), Key).
-spec prev(term(), term(), term(), term()) -> term().
prev(Tid, Ts, Tab, Key) -> hm_ec_access:prev(Tid, Ts, tab(Tab), Key).
-spec foldl(term(), term(), fun(), term(), term(), atom()) -> term().
foldl(Tid, Ts, Fun, Acc, Tab, Kind) -> hm_ec_access:foldl(Tid, Ts, Fun, Acc, tab(Tab), Kind).
-spec foldr(term(), term(), fun(), term(), term(), atom()) -> term().
foldr(Tid, Ts, Fun, Acc, Tab, Kind) -> hm_ec_access:foldr(Tid, Ts, Fun, Acc, tab(Tab), Kind).
-spec clear_table(term(), term(), term(), term()) -> term().
clear_table(Tid, Ts, Tab, Obj) -> hm_ec_access:clear_table(Tid, Ts, tab(Tab), Obj).
