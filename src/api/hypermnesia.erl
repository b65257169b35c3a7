%% @doc Hypermnesia: eventually consistent, partition-tolerant tables on stock Mnesia
%% (after "Hypermnesia: Eventual Consistency in Mnesia").
%%
%% Create a table with `{ec, pawset}' (add-wins) or `{ec, prwset}' (remove-wins) beside
%% Mnesia's own options and run your existing Mnesia code under `async_ec' instead of
%% `transaction' or `async_dirty':
%% ```
%% {atomic, ok} = hypermnesia:create_table(student, [{ec, pawset},
%%                                                   {attributes, [id, name]},
%%                                                   {ram_copies, Nodes}]),
%% ok = hypermnesia:async_ec(fun() -> mnesia:write({student, 1, <<"ada">>}) end).
%% '''
%% Writes apply locally and return at once; they reach the other copy holders by causal
%% broadcast, are kept for members that cannot be reached, and are resent when they come
%% back. Every copy converges; see docs/guide/README.md.
-module(hypermnesia).

-export([start/0, create_table/2, delete_table/1, add_table_copy/3, del_table_copy/2,
         forget_node/1, restore/2, owners/2, change_table_frag/2, get/3, put/4, delete/4,
         async_ec/1, async_ec/2, sync_ec/1, sync_ec/2, activity/2, activity/3, activity/4,
         ec_transaction/1, ec_transaction/2, is_ec_activity/0, info/0, info/1, info/2]).
-export([is_ec_table/1, ec_options/1]).
-export([cluster_info/0, cluster_info/1, cluster_info/2, wait_converged/1, wait_converged/2,
         subscribe/1, unsubscribe/1, http_status_url/0]).
-export([start_status_page/0, start_status_page/1, stop_status_page/0]).
-export([start/1, update/3, value/2, increment/2, increment/3, decrement/2, decrement/3,
         get_counter/2, add_set/3, remove_set/3, get_set/2, put_register/3, get_register/2]).
-export_type([ec_type/0, policy/0]).

-type ec_type() :: pawset | prwset.
-type policy() :: term_order | lww | siblings.


%% @doc Start Mnesia if it is not running, then Hypermnesia. The `hypermnesia' application
%% itself never starts Mnesia: an application that depends on it creates its disc schema
%% first and starts Mnesia when it is ready; EC tables are taken up once Mnesia has loaded
%% them (see docs/guide/09-in-your-application.md).
%%
%% Before Hypermnesia starts, the running Mnesia is checked for the internals an EC table's
%% refusal of transactions relies on (the supported Erlang/OTP releases have them): when one
%% differs, the answer is `{error, {unsupported_mnesia, MnesiaVsn, What}}' and Hypermnesia is
%% not started.
-spec start() -> ok | {error, term()}.
start() ->
    case application:ensure_all_started(mnesia) of
        {ok, _} ->
            case hm_ec_mnesia:self_check() of
                ok -> started(application:ensure_all_started(hypermnesia));
                {error, _} = E -> E
            end;
        {error, _} = E -> E
    end.

started({ok, _}) -> ok;
started({error, _} = E) -> E.

%% @doc Create a table. With `{ec, pawset | prwset}' (or the older `{type, pawset | prwset}')
%% it is an EC table; the other options are Mnesia's own, with Mnesia's meaning
%% (`attributes', `record_name', `index', `ram_copies', `disc_copies', `{type, set |
%% ordered_set}', ...), plus `{conflict, term_order | lww | siblings}' (default
%% `term_order'). Without an EC type this is `mnesia:create_table/2'. An EC table is never a
%% Mnesia `bag' (`{aborted, {bad_ec_option, Tab, {type, bag}}}'); see
%% {@link hm_ec_registry:ec_spec/1} and docs/limits.md.
%% With `{frag_properties, [{n_fragments, F}, {n_ram_copies | n_disc_copies, N},
%% {node_pool, Nodes}]}' an EC table is partitioned: `F' fragments placed on a
%% consistent-hash ring of the pool, `N' copies each; see {@link hm_partition:create_table/2}.
%% With `{crdt, Type}' and `{flavor, op | state | delta}' it is a CRDT table, fully
%% replicated or partitioned; see {@link hm_crdt_table:create_table/2}.
-spec create_table(atom(), [tuple()]) -> {atomic, ok} | {aborted, term()}.
create_table(Tab, Opts) -> hm_crdt_table:create_table(Tab, Opts).

%% @doc Delete a table; for an EC table, its helper tables too, and for a partitioned one
%% every fragment.
-spec delete_table(atom()) -> {atomic, ok} | {aborted, term()}.
delete_table(Tab) -> hm_partition:delete_table(Tab).

%% @doc The nodes holding `Key' of `Tab' (for a partitioned table, the holders of the key's
%% fragment, in the order of its preference list: the same answer on every node).
-spec owners(atom(), term()) -> [node()] | {error, {no_exists, atom()}}.
owners(Tab, Key) -> hm_partition:owners(Tab, Key).

%% @doc The records of `Key' in EC table `Tab' (all of them, side by side, on a `siblings'
%% table) and an opaque causal context for {@link put/4} and {@link delete/4}; `{r, R}'
%% reads `R' holders. See {@link hm_kv:get/3}.
-spec get(atom(), term(), [{r, pos_integer()}]) -> {ok, [tuple()], term()} | {error, term()}.
get(Tab, Key, Opts) -> hm_kv:get(Tab, Key, Opts).

%% @doc Write `Record', superseding exactly the records `Context' (from {@link get/3}, or
%% `undefined') names; `{w, W}' waits for the reachable holders when `W' > 1. See
%% {@link hm_kv:put/4}.
-spec put(atom(), tuple(), term(), [{w, pos_integer()}]) -> ok | {error, term()}.
put(Tab, Record, Context, Opts) -> hm_kv:put(Tab, Record, Context, Opts).

%% @doc Delete the records of `Key' that `Context' names (`undefined': the key). See
%% {@link hm_kv:delete/4}.
-spec delete(atom(), term(), term(), [{w, pos_integer()}]) -> ok | {error, term()}.
delete(Tab, Key, Context, Opts) -> hm_kv:delete(Tab, Key, Context, Opts).

%% @doc `{add_node, Node}' or `{del_node, Node}' on a partitioned EC table: only the fragments
%% the ring reassigns move, by state transfer, while reads and writes go on. Other changes,
%% and other tables, go to `mnesia:change_table_frag/2'. See
%% {@link hm_partition:change_table_frag/2}.
-spec change_table_frag(atom(), term()) -> {atomic, ok} | {aborted, term()}.
change_table_frag(Tab, Change) -> hm_partition:change_table_frag(Tab, Change).

%% @doc Add a copy (`ram_copies' or `disc_copies') of a table on `Node'; a new EC copy catches
%% up by state transfer before it takes writes.
-spec add_table_copy(atom(), node(), ram_copies | disc_copies) -> {atomic, ok} | {aborted, term()}.
add_table_copy(Tab, Node, Type) -> hm_ec_registry:add_table_copy(Tab, Node, Type).

%% @doc Remove the copy of a table on `Node' (for an EC table: `Node' stops being a member).
-spec del_table_copy(atom(), node()) -> {atomic, ok} | {aborted, term()}.
del_table_copy(Tab, Node) -> hm_ec_registry:del_table_copy(Tab, Node).

%% @doc Remove a node that is gone for good from the cluster, while it is down: every copy
%% it held (the EC tables stop waiting for it) and its place in the pool of every partitioned
%% table (its fragments get new copies from the others). See {@link hm_partition:forget_node/1}.
-spec forget_node(node()) -> {atomic, ok} | {aborted, term()}.
forget_node(Node) -> hm_partition:forget_node(Node).

%% @doc `mnesia:restore/2' for backups that hold EC tables: EC tables are restored by EC
%% operations; see {@link hm_ec_registry:restore/2}.
-spec restore(term(), [tuple()]) -> {atomic, [atom()]} | {aborted, term()}.
restore(Opaque, Args) -> hm_ec_registry:restore(Opaque, Args).

%% @doc Run `Fun' in the `async_ec' access context: like `mnesia:async_dirty/1', and writes
%% to EC tables are eventually consistent. Returns what `Fun' returns; exits with
%% `{aborted, Reason}' as Mnesia activities do.
-spec async_ec(fun(() -> R)) -> R.
async_ec(Fun) -> activity(async_ec, Fun, []).

%% @doc {@link async_ec/1} with arguments: runs `apply(Fun, Args)', as `mnesia:activity/3'
%% does.
-spec async_ec(fun((...) -> R), list()) -> R.
async_ec(Fun, Args) -> activity(async_ec, Fun, Args).

%% @doc Like {@link async_ec/1}, but each EC write returns once every reachable copy holder
%% has applied it (and, on `disc_copies', once the local write is on disc).
-spec sync_ec(fun(() -> R)) -> R.
sync_ec(Fun) -> activity(sync_ec, Fun, []).

%% @doc {@link sync_ec/1} with arguments: runs `apply(Fun, Args)'.
-spec sync_ec(fun((...) -> R), list()) -> R.
sync_ec(Fun, Args) -> activity(sync_ec, Fun, Args).

%% @doc `Fun' under {@link sync_ec/1}, answered in `mnesia:transaction/1''s shape, for code
%% built around it: `{atomic, Result}' when it returns, `{aborted, Reason}' when it aborts
%% (`mnesia:abort(Reason)', a write refused), exits with `Reason', raises an error
%% (`{aborted, {Reason, Stacktrace}}') or throws (`{aborted, {throw, Value}}'), exactly
%% where a transaction would. It is not a transaction: no locks, no isolation, each write
%% applied as it is made (what ran before an abort stays written); see the guide's
%% migration chapter.
-spec ec_transaction(fun(() -> R)) -> {atomic, R} | {aborted, term()}.
ec_transaction(Fun) -> ec_transaction(Fun, []).

%% @doc {@link ec_transaction/1} with arguments: `apply(Fun, Args)', as
%% `mnesia:transaction/2' does.
-spec ec_transaction(fun((...) -> R), list()) -> {atomic, R} | {aborted, term()}.
ec_transaction(Fun, Args) ->
    %% the result travels tagged: an activity that is not a transaction takes a fun's
    %% `{aborted, R}' for an abort, a transaction returns it as any other value
    try sync_ec(fun() -> {?MODULE, apply(Fun, Args)} end) of
        {?MODULE, Result} -> {atomic, Result}
    catch
        exit:{aborted, Reason} -> {aborted, Reason};
        exit:Reason -> {aborted, Reason};
        throw:Value -> {aborted, {throw, Value}};
        error:Reason:Stack -> {aborted, {Reason, Stack}}
    end.

%% @doc Whether the calling process runs inside an `async_ec' or `sync_ec' activity (and not
%% in a transaction or dirty activity nested in one).
-spec is_ec_activity() -> boolean().
is_ec_activity() ->
    case mnesia:get_activity_id() of
        {hm_ec_access, _, _} -> true;
        _ -> false
    end.

%% @doc `mnesia:activity/2' with the EC contexts added; other kinds go to Mnesia.
-spec activity(atom() | tuple(), fun(() -> R)) -> R.
activity(Kind, Fun) -> activity(Kind, Fun, []).

%% @doc `mnesia:activity/3' with the EC contexts added: `Kind' `async_ec' or `sync_ec' runs
%% `apply(Fun, Args)' as {@link async_ec/2} or {@link sync_ec/2} do (tables that are not EC
%% tables through plain Mnesia); any other kind (`transaction', `async_dirty',
%% `{transaction, Retries}', ...) goes to `mnesia:activity/3' unchanged, with the access
%% module Mnesia is configured with (its `access_module' parameter).
-spec activity(atom() | tuple(), fun((...) -> R), list()) -> R.
activity(async_ec, Fun, Args) -> hm_ec_access:activity(async, Fun, Args);
activity(sync_ec, Fun, Args) -> hm_ec_access:activity(sync, Fun, Args);
activity(Kind, Fun, Args) -> mnesia:activity(Kind, Fun, Args).

%% @doc `mnesia:activity/4' with the EC contexts added: as {@link activity/3}, with the
%% access module `Mod' (`mnesia_frag' for Mnesia's fragmented tables, for instance). Under
%% `async_ec' and `sync_ec', EC tables are Hypermnesia's and every other table is accessed
%% through `Mod'; a `Mod' that is not a loaded `mnesia_access' module exits with
%% `{aborted, {bad_access_module, Mod}}' and the fun does not run. Other kinds are
%% `mnesia:activity(Kind, Fun, Args, Mod)'.
-spec activity(atom() | tuple(), fun((...) -> R), list(), module()) -> R.
activity(async_ec, Fun, Args, Mod) -> hm_ec_access:activity(async, Fun, Args, Mod);
activity(sync_ec, Fun, Args, Mod) -> hm_ec_access:activity(sync, Fun, Args, Mod);
activity(Kind, Fun, Args, Mod) -> mnesia:activity(Kind, Fun, Args, Mod).

%% @doc This node's view: Mnesia members and running nodes, membership back-off, the writes
%% held here as hints (for tables none of whose holders it can reach), and for every EC
%% table what {@link info/1} gives. `{error, {node_not_running, node()}}' when the
%% hypermnesia application is not running here.
-spec info() -> map() | {error, {node_not_running, node()}}.
info() ->
    if_running(fun() ->
                       Server = hm_ec_server:info(),
                       #{node => node(),
                         membership => hm_membership:status(),
                         queued_ops => maps:get(queued_ops, Server),
                         hints => maps:get(hints, Server),
                         tables => maps:get(tables, Server)}
               end).

%% @doc One EC table on this node: type, conflict policy, members and which are reachable,
%% delivered and stable vectors, buffered (not yet deliverable) and unstable operations, keys
%% with metadata and its memory in words, size. `{error, {not_ec_table, Tab}}' when `Tab' is
%% not an EC table with a copy here, `{error, {node_not_running, node()}}' when the
%% hypermnesia application is not running here. A partitioned table is one table: its
%% fragments on this node summed, on any node (see {@link hm_ec_frag_info:info/2}).
-spec info(atom()) -> map() | {error, term()}.
info(Tab) -> info(Tab, #{}).

%% @doc {@link info/1} with options: `#{fragments => true}' adds, for a partitioned table,
%% each local fragment's own status under `fragments'.
-spec info(atom(), hm_ec_frag_info:options()) -> map() | {error, term()}.
info(Tab, Opts) -> if_running(fun() -> hm_ec_frag_info:info(Tab, Opts) end).

%% Mnesia's convention for a node where it does not run, instead of a bare noproc exit.
if_running(Fun) ->
    Down = {error, {node_not_running, node()}},
    case whereis(hm_ec_server) of
        undefined -> Down;
        _ ->
            try Fun()
            catch exit:{Gone, {gen_server, call, _}} when Gone =:= noproc; Gone =:= normal;
                                                          Gone =:= shutdown ->
                    Down
            end
    end.

%% @doc Whether `Tab' is an EC table.
-spec is_ec_table(atom()) -> boolean().
is_ec_table(Tab) -> hm_ec_registry:is_ec_table(Tab).

%% @doc The EC options of a table (`#{type, conflict, meta, log}'), or `error'.
-spec ec_options(atom()) -> {ok, #{atom() => term()}} | error.
ec_options(Tab) -> hm_ec_registry:ec_options(Tab).

%% @doc Whether every copy of every EC table has converged, asked of every member of the
%% cluster: `#{converged, nodes, tables}'; see {@link hm_status:cluster_info/2} and
%% docs/guide/05-operations.md.
-spec cluster_info() -> hm_status:info() | {error, term()}.
cluster_info() -> hm_status:cluster_info().

%% @doc {@link cluster_info/0} for one EC table.
-spec cluster_info(atom()) -> hm_status:info() | {error, term()}.
cluster_info(Tab) -> hm_status:cluster_info(Tab).

%% @doc {@link cluster_info/1} with options (`timeout' in ms, default 5000; `all' for every
%% table).
-spec cluster_info(atom(), hm_status:options()) -> hm_status:info() | {error, term()}.
cluster_info(Tab, Opts) -> hm_status:cluster_info(Tab, Opts).

%% @doc Wait until every copy of every EC table has converged, for at most `TimeoutMs' ms.
-spec wait_converged(non_neg_integer()) -> ok | {error, term()}.
wait_converged(TimeoutMs) -> hm_status:wait_converged(TimeoutMs).

%% @doc {@link wait_converged/1} for one EC table (`all': every one).
-spec wait_converged(atom(), non_neg_integer()) -> ok | {error, term()}.
wait_converged(Tab, TimeoutMs) -> hm_status:wait_converged(Tab, TimeoutMs).

%% @doc Receive `{hypermnesia_event, Event, Info}' for every later `Event' of this node
%% (`all': every event); see {@link hm_events}.
-spec subscribe(hm_events:event() | all) -> ok | {error, term()}.
subscribe(Event) -> hm_events:subscribe(Event).

%% @doc Stop receiving `Event' (`all': every event).
-spec unsubscribe(hm_events:event() | all) -> ok | {error, term()}.
unsubscribe(Event) -> hm_events:unsubscribe(Event).

%% @doc The address of this node's HTTP status page (without its token), or
%% `{error, not_enabled}'; see {@link hm_http}.
-spec http_status_url() -> {ok, string()} | {error, not_enabled}.
http_status_url() -> hm_http:url().

%% @doc Start the HTTP status page on a running node, with the `http_status' application
%% environment. See {@link hm_http:start_page/1}.
-spec start_status_page() -> {ok, string()} | {error, term()}.
start_status_page() -> hm_http:start_page(configured).

%% @doc Start the HTTP status page on a running node with `#{port, token}' (kept as the
%% `http_status' application environment). See {@link hm_http:start_page/1}.
-spec start_status_page(map()) -> {ok, string()} | {error, term()}.
start_status_page(Config) -> hm_http:start_page(Config).

%% @doc Stop the HTTP status page; the node and the rest of Hypermnesia go on. `ok' also when
%% it is not running.
-spec stop_status_page() -> ok | {error, term()}.
stop_status_page() -> hm_http:stop_page().

%% @doc Apply a CRDT operation to `Key' of CRDT table `Tab', from any node. See
%% {@link hm_crdt_table:update/3}.
-spec update(atom(), term(), term()) -> ok | {error, term()}.
update(Tab, Key, Op) -> hm_crdt_table:update(Tab, Key, Op).

%% @doc The value of `Key' in CRDT table `Tab' (the type's empty value when absent). See
%% {@link hm_crdt_table:value/2}.
-spec value(atom(), term()) -> term() | {error, term()}.
value(Tab, Key) -> hm_crdt_table:value(Tab, Key).

%% @doc Counter tables: add 1.
-spec increment(atom(), term()) -> ok | {error, term()}.
increment(Tab, Key) -> hm_crdt_table:increment(Tab, Key).

%% @doc Counter tables: add `N'.
-spec increment(atom(), term(), non_neg_integer()) -> ok | {error, term()}.
increment(Tab, Key, N) -> hm_crdt_table:increment(Tab, Key, N).

%% @doc `pncounter' tables: subtract 1.
-spec decrement(atom(), term()) -> ok | {error, term()}.
decrement(Tab, Key) -> hm_crdt_table:decrement(Tab, Key).

%% @doc `pncounter' tables: subtract `N'.
-spec decrement(atom(), term(), non_neg_integer()) -> ok | {error, term()}.
decrement(Tab, Key, N) -> hm_crdt_table:decrement(Tab, Key, N).

%% @doc Counter tables: the value.
-spec get_counter(atom(), term()) -> integer() | {error, term()}.
get_counter(Tab, Key) -> hm_crdt_table:get_counter(Tab, Key).

%% @doc Set tables: add an element.
-spec add_set(atom(), term(), term()) -> ok | {error, term()}.
add_set(Tab, Key, E) -> hm_crdt_table:add_set(Tab, Key, E).

%% @doc Set tables: remove an element.
-spec remove_set(atom(), term(), term()) -> ok | {error, term()}.
remove_set(Tab, Key, E) -> hm_crdt_table:remove_set(Tab, Key, E).

%% @doc Set tables: the elements, sorted.
-spec get_set(atom(), term()) -> [term()] | {error, term()}.
get_set(Tab, Key) -> hm_crdt_table:get_set(Tab, Key).

%% @doc Register tables: assign a value.
-spec put_register(atom(), term(), term()) -> ok | {error, term()}.
put_register(Tab, Key, V) -> hm_crdt_table:put_register(Tab, Key, V).

%% @doc Register tables: the value.
-spec get_register(atom(), term()) -> term() | {error, term()}.
get_register(Tab, Key) -> hm_crdt_table:get_register(Tab, Key).

%% @doc Start from a cluster configuration file (nodes, fragments, replication, storage,
%% flavor, epoch, CRDT tables): start Mnesia and Hypermnesia here, join the listed nodes and
%% create the listed tables that do not exist yet. See {@link hm_config:start/1}.
-spec start(file:filename()) -> ok | {error, term()}.
start(File) -> hm_config:start(File).
