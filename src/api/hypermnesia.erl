%% @doc Hypermnesia: eventually consistent, partition-tolerant tables on stock Mnesia
%% (after "Hypermnesia: Eventual Consistency in Mnesia").
%%
%% Create a table with `{type, pawset}' (add-wins) or `{type, prwset}' (remove-wins) and run
%% your existing Mnesia code under `async_ec' instead of `transaction' or `async_dirty':
%% ```
%% {atomic, ok} = hypermnesia:create_table(student, [{type, pawset},
%%                                                   {attributes, [id, name]},
%%                                                   {ram_copies, Nodes}]),
%% ok = hypermnesia:async_ec(fun() -> mnesia:write({student, 1, <<"ada">>}) end).
%% '''
%% Writes apply locally and return at once; they reach the other copy holders by causal
%% broadcast, are kept for members that cannot be reached, and are resent when they come
%% back. Every copy converges; see docs/guide.md.
-module(hypermnesia).

-export([start/0, create_table/2, delete_table/1, add_table_copy/3, del_table_copy/2,
         restore/2,
         async_ec/1, async_ec/2, sync_ec/1, sync_ec/2, activity/2, activity/3,
         info/0, info/1]).
-export([is_ec_table/1, ec_options/1]).
-export_type([ec_type/0, policy/0]).

-type ec_type() :: pawset | prwset.
-type policy() :: term_order | lww | siblings.


%% @doc Start Mnesia if it is not running, then Hypermnesia. The `hypermnesia' application
%% itself never starts Mnesia: an application that depends on it creates its disc schema
%% first and starts Mnesia when it is ready; EC tables are taken up once Mnesia has loaded
%% them (see "Using Hypermnesia in your application" in docs/guide.md).
-spec start() -> ok | {error, term()}.
start() ->
    case application:ensure_all_started(mnesia) of
        {ok, _} -> started(application:ensure_all_started(hypermnesia));
        {error, _} = E -> E
    end.

started({ok, _}) -> ok;
started({error, _} = E) -> E.

%% @doc Create a table. With `{type, pawset | prwset}' it is an EC table; other options are
%% Mnesia's own (`attributes', `record_name', `index', `ram_copies', `disc_copies', ...),
%% plus `{conflict, term_order | lww | siblings}' (default `term_order'). With a Mnesia type
%% (`set', `bag', `ordered_set') or none, this is `mnesia:create_table/2'. An EC table is never
%% an `ordered_set'; see {@link hm_ec_registry:create_table/2} and docs/guide.md.
-spec create_table(atom(), [tuple()]) -> {atomic, ok} | {aborted, term()}.
create_table(Tab, Opts) -> hm_ec_registry:create_table(Tab, Opts).

%% @doc Delete a table; for an EC table, its helper tables too.
-spec delete_table(atom()) -> {atomic, ok} | {aborted, term()}.
delete_table(Tab) -> hm_ec_registry:delete_table(Tab).

%% @doc Add a copy (`ram_copies' or `disc_copies') of a table on `Node'; a new EC copy catches
%% up by state transfer before it takes writes.
-spec add_table_copy(atom(), node(), ram_copies | disc_copies) -> {atomic, ok} | {aborted, term()}.
add_table_copy(Tab, Node, Type) -> hm_ec_registry:add_table_copy(Tab, Node, Type).

%% @doc Remove the copy of a table on `Node' (for an EC table: `Node' stops being a member).
-spec del_table_copy(atom(), node()) -> {atomic, ok} | {aborted, term()}.
del_table_copy(Tab, Node) -> hm_ec_registry:del_table_copy(Tab, Node).

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

%% @doc `mnesia:activity/2' with the EC contexts added; other kinds go to Mnesia.
-spec activity(atom() | tuple(), fun(() -> R)) -> R.
activity(Kind, Fun) -> activity(Kind, Fun, []).

%% @doc `mnesia:activity/3' with the EC contexts added: `Kind' `async_ec' or `sync_ec' runs
%% `apply(Fun, Args)' as {@link async_ec/2} or {@link sync_ec/2} do; any other kind
%% (`transaction', `async_dirty', `{transaction, Retries}', ...) goes to Mnesia unchanged.
-spec activity(atom() | tuple(), fun((...) -> R), list()) -> R.
activity(async_ec, Fun, Args) -> with_mode(async, Fun, Args);
activity(sync_ec, Fun, Args) -> with_mode(sync, Fun, Args);
activity(Kind, Fun, Args) -> mnesia:activity(Kind, Fun, Args, mnesia).

with_mode(Mode, Fun, Args) ->
    Old = put(hm_ec_mode, Mode),
    try mnesia:activity(async_dirty, Fun, Args, hm_ec_access)
    after restore(Old)
    end.

restore(undefined) -> erase(hm_ec_mode);
restore(Old) -> put(hm_ec_mode, Old).

%% @doc This node's view: Mnesia members and running nodes, membership back-off, and for
%% every EC table what {@link info/1} gives. `{error, {node_not_running, node()}}' when the
%% hypermnesia application is not running here.
-spec info() -> map() | {error, {node_not_running, node()}}.
info() ->
    if_running(fun() ->
                       Server = hm_ec_server:info(),
                       #{node => node(),
                         membership => hm_membership:status(),
                         queued_ops => maps:get(queued_ops, Server),
                         tables => maps:get(tables, Server)}
               end).

%% @doc One EC table on this node: type, conflict policy, members and which are reachable,
%% delivered and stable vectors, buffered (not yet deliverable) and unstable operations, keys
%% with metadata and its memory in words, size. `{error, {not_ec_table, Tab}}' when `Tab' is
%% not an EC table with a copy here, `{error, {node_not_running, node()}}' when the
%% hypermnesia application is not running here.
-spec info(atom()) -> map() | {error, term()}.
info(Tab) -> if_running(fun() -> hm_ec_server:info(Tab) end).

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
