%% @doc CRDT tables: a counter, set, register, flag or map per key, in the op, state or delta
%% flavor chosen per table, fully replicated or partitioned, updated and read from any node
%% (the ChiaVe paper, *ChiaVe: A Flexible CRDT-Based Key-Value Store*, §3 "Design": one
%% interface over every CRDT and flavor, the key space sharded over nodes by consistent
%% hashing, a client proxy that retries across the owners of a key).
%%
%% ```
%% {atomic, ok} = hypermnesia:create_table(likes, [{crdt, gcounter}, {flavor, op},
%%                                                 {ram_copies, Nodes}]),
%% ok = hypermnesia:update(likes, post1, {increment, 2}),
%% 2 = hypermnesia:value(likes, post1).
%% '''
%%
%% == Design ==
%% A CRDT table is an EC table (pawset, records `{Tab, Key, Crdt}') whose EC options name
%% its CRDT (`crdt => {Type, Flavor}'); with `frag_properties' each fragment is such a table,
%% placed on the ring as every partitioned table's fragments are ({@link hm_partition}). The
%% per-table core ({@link hm_ec_table}) applies CRDT operations through the per-key core
%% {@link hm_ec_crdt}: so a CRDT table gets, unchanged, the tagged causal broadcast's
%% exactly-once causal delivery, retransmission to members that were cut off, state
%% transfer to new and restarted copies, disc logs, and, when partitioned, forwarding from
%% nodes without a copy to a holder and hints when no holder answers. An operation is
%% prepared at the copy that takes it (against that copy's state of the key) and travels as
%% the flavor says: the pure operation (`op', at once), or, batched per broadcast epoch (the
%% ChiaVe paper's propagation per epoch), the new states of the keys the epoch changed
%% (`state') or its deltas (`delta').
%%
%% {@link update/3} checks the operation against the table's type before anything is sent,
%% so a bad operation changes nothing anywhere. {@link value/2} reads the key's copy here,
%% or on the first reachable holder that answers (the key's owners, in turn).
%%
%% A copy writes a key's row at most once per broadcast epoch (write-behind, see
%% {@link hm_ec_table}): between two, its table's process holds the key's newer state and
%% marks the key ({@link hm_ec_store_mnesia:is_unwritten/2}). A read finds the mark and asks
%% the process, or finds none and reads the row, which then holds every update the copy
%% applied before the read began: {@link value/2} and the client calls show every update
%% this copy applied (read-your-writes on the node that took the update).
%%
%% Invariants: a CRDT table's copies accept only CRDT operations of its type (a plain
%% `async_ec' write on one is refused); every copy that delivered the same operations shows
%% the same value; a read on a copy shows every update the copy applied before it began.
-module(hm_crdt_table).

-export([create_table/2, update/3, value/2, spec/1, local_value/3]).
-export([increment/2, increment/3, decrement/2, decrement/3, get_counter/2,
         add_set/3, remove_set/3, get_set/2, put_register/3, get_register/2]).

-define(REMOTE_TIMEOUT, 10000).
%% options of a CRDT table that are not Mnesia's
-define(OWN, [crdt, flavor, epoch]).
%% Mnesia options a CRDT table sets itself
-define(FIXED, [ec, type, attributes, record_name, index, conflict]).

%% @doc Create a table. With `{crdt, Type}' (any of {@link hm_crdt:types/0}) and optionally
%% `{flavor, op | state | delta}' (default `op') and `{epoch, Ms}' (the broadcast epoch of
%% the state and delta flavors, default 100) it is a CRDT table: the other options are
%% copy lists (`ram_copies', `disc_copies': every node listed holds every key) or
%% `frag_properties' (partitioned, see {@link hm_partition:create_table/2}). Errors:
%% `{aborted, {bad_crdt_option, Tab, Option}}' for an unknown type or flavor, an epoch that
%% is not a positive integer, or an option a
%% CRDT table sets itself (`ec', `type', `attributes', `record_name', `index', `conflict'), and
%% those of `hypermnesia:create_table/2'. Without `crdt' this is
%% {@link hm_partition:create_table/2}.
-spec create_table(atom(), [tuple()]) -> {atomic, ok} | {aborted, term()}.
create_table(Tab, Opts) when is_atom(Tab), is_list(Opts) ->
    %% a malformed list (improper, or an option not a tuple) is the registry's to refuse
    case hm_ec_registry:is_options(Opts) andalso
        (lists:keymember(crdt, 1, Opts) orelse lists:keymember(flavor, 1, Opts)) of
        true -> create_crdt_table(Tab, Opts);
        false -> hm_partition:create_table(Tab, Opts)
    end;
create_table(Tab, Opts) -> hm_partition:create_table(Tab, Opts).

create_crdt_table(Tab, Opts) ->
    Type = proplists:get_value(crdt, Opts),
    Flavor = proplists:get_value(flavor, Opts, op),
    Epoch = proplists:get_value(epoch, Opts, 100),
    Fixed = [O || O <- Opts, is_tuple(O), tuple_size(O) >= 1,
                  lists:member(element(1, O), ?FIXED)],
    case {lists:member(Type, hm_crdt:types()), lists:member(Flavor, hm_crdt:flavors()), Fixed} of
        {false, _, _} -> {aborted, {bad_crdt_option, Tab, {crdt, Type}}};
        {_, false, _} -> {aborted, {bad_crdt_option, Tab, {flavor, Flavor}}};
        {_, _, [O | _]} -> {aborted, {bad_crdt_option, Tab, O}};
        _ when not is_integer(Epoch); Epoch < 1 -> {aborted, {bad_crdt_option, Tab, {epoch, Epoch}}};
        {true, true, []} ->
            Rest = [O || O <- Opts, not (is_tuple(O) andalso tuple_size(O) >= 1
                                         andalso lists:member(element(1, O), ?OWN))],
            EcOpts = [{type, pawset}, {attributes, [key, value]} | Rest],
            Extra = #{crdt => {Type, Flavor}, crdt_epoch => Epoch},
            case lists:keymember(frag_properties, 1, Rest) of
                true -> hm_partition:create_table(Tab, EcOpts, Extra);
                false ->
                    case hm_ec_registry:create_table(Tab, EcOpts, Extra) of
                        {atomic, ok} -> ok = hm_ec_registry:wait_ready([Tab]), {atomic, ok};
                        Aborted -> Aborted
                    end
            end
    end.

%% @doc The CRDT type and flavor of a CRDT table.
-spec spec(atom()) -> {ok, hm_ec_crdt:spec()} | {error, {not_crdt_table, atom()}}.
spec(Tab) ->
    case hm_ec_registry:ec_options(Tab) of
        {ok, #{crdt := Spec}} -> {ok, Spec};
        _ -> {error, {not_crdt_table, Tab}}
    end.

%% @doc Apply `Op' (an operation of the table's type, see docs/crdt.md) to `Key'. Returns once
%% the copy that took it applied it; it reaches the other copies by the table's broadcast.
%% Errors: `{error, {not_crdt_table, Tab}}', `{error, {bad_op, Type, Op}}' (nothing
%% changes), and those of `hm_ec_server:submit/3' (e.g. a copy still catching up with no
%% other holder reachable keeps the operation as a hint and answers `ok').
-spec update(atom(), term(), term()) -> ok | {error, term()}.
update(Tab, Key, Op) ->
    %% the table's options are read once per update (a Mnesia table_info, about a
    %% microsecond: under a tenth of what the update costs the node that takes it)
    case hm_ec_registry:ec_options(Tab) of
        {ok, Opts = #{crdt := {Type, _}}} ->
            case hm_crdt:is_op(Type, Op) of
                true -> hm_ec_server:submit(hm_ec_frag:fragment_table(Tab, Key, Opts),
                                            {Key, {update, Op}}, async);
                false -> {error, {bad_op, Type, Op}}
            end;
        _ -> {error, {not_crdt_table, Tab}}
    end.

%% @doc The value of `Key' (the type's empty value when it was never written: `0', `[]',
%% `undefined', `false'), read on this node's copy or on the first reachable owner that
%% answers. Errors: `{error, {not_crdt_table, Tab}}', `{error, {unavailable, Tab, Key}}'
%% (no copy here and no owner reachable).
-spec value(atom(), term()) -> term() | {error, term()}.
value(Tab, Key) ->
    case spec(Tab) of
        {ok, Spec} ->
            Frag = hm_ec_frag:fragment_table(Tab, Key),
            Read = case hm_ec_frag:is_local(Frag) of
                       true -> local_value(Frag, Key, Spec);
                       false -> read_remote(hm_ec_frag:holders(Frag), Frag, Key, Spec)
                   end,
            case Read of
                {ok, V} -> V;
                error -> {error, {unavailable, Tab, Key}}
            end;
        Error -> Error
    end.

%% @doc The value of `Key' in this node's copy of table (or fragment) `Frag', a CRDT table
%% of `Spec': from the table's process when the key's row lacks updates it applied, from
%% the row otherwise. `error' when there is no copy here.
-spec local_value(atom(), term(), hm_ec_crdt:spec()) -> {ok, term()} | error.
local_value(Frag, Key, Spec) ->
    Marked = try hm_ec_store_mnesia:is_unwritten(Frag, Key) andalso
                     hm_ec_table_server:crdt_value(hm_ec_table_server:name(Frag), Key,
                                                   ?REMOTE_TIMEOUT)
             catch exit:_ -> gone
             end,
    case Marked of
        {ok, V} -> {ok, V};
        _ -> row_value(Frag, Key, Spec)           % not marked, or the process is gone
    end.

row_value(Frag, Key, Spec) ->
    try mnesia:dirty_read(Frag, Key) of
        [{_, _, C}] -> {ok, hm_ec_crdt:value(C)};
        [] -> {ok, hm_ec_crdt:empty_value(Spec)}
    catch exit:{aborted, _} -> error
    end.

read_remote([], _Frag, _Key, _Spec) -> error;
read_remote([H | Hs], Frag, Key, Spec) ->
    try erpc:call(H, ?MODULE, local_value, [Frag, Key, Spec], ?REMOTE_TIMEOUT) of
        {ok, V} -> {ok, V};
        _ -> read_remote(Hs, Frag, Key, Spec)
    catch
        error:{exception, undef, _} ->
            %% a holder of a release without local_value/3: its row
            try erpc:call(H, mnesia, dirty_read, [Frag, Key], ?REMOTE_TIMEOUT) of
                [{_, _, C}] -> {ok, hm_ec_crdt:value(C)};
                [] -> {ok, hm_ec_crdt:empty_value(Spec)};
                _ -> read_remote(Hs, Frag, Key, Spec)
            catch _:_ -> read_remote(Hs, Frag, Key, Spec)
            end;
        _:_ -> read_remote(Hs, Frag, Key, Spec)
    end.

%%% ---------------------------------------------------------------- ChiaVe's client calls

%% @doc Counters: add 1.
-spec increment(atom(), term()) -> ok | {error, term()}.
increment(Tab, Key) -> update(Tab, Key, {increment, 1}).

%% @doc Counters: add `N' (N >= 0).
-spec increment(atom(), term(), non_neg_integer()) -> ok | {error, term()}.
increment(Tab, Key, N) -> update(Tab, Key, {increment, N}).

%% @doc `pncounter': subtract 1.
-spec decrement(atom(), term()) -> ok | {error, term()}.
decrement(Tab, Key) -> update(Tab, Key, {decrement, 1}).

%% @doc `pncounter': subtract `N' (N >= 0).
-spec decrement(atom(), term(), non_neg_integer()) -> ok | {error, term()}.
decrement(Tab, Key, N) -> update(Tab, Key, {decrement, N}).

%% @doc A counter's value.
-spec get_counter(atom(), term()) -> integer() | {error, term()}.
get_counter(Tab, Key) -> value(Tab, Key).

%% @doc Sets: add an element.
-spec add_set(atom(), term(), term()) -> ok | {error, term()}.
add_set(Tab, Key, E) -> update(Tab, Key, {add, E}).

%% @doc Sets: remove an element.
-spec remove_set(atom(), term(), term()) -> ok | {error, term()}.
remove_set(Tab, Key, E) -> update(Tab, Key, {remove, E}).

%% @doc A set's elements, sorted.
-spec get_set(atom(), term()) -> [term()] | {error, term()}.
get_set(Tab, Key) -> value(Tab, Key).

%% @doc Registers: assign a value.
-spec put_register(atom(), term(), term()) -> ok | {error, term()}.
put_register(Tab, Key, V) -> update(Tab, Key, {assign, V}).

%% @doc A register's value (`lwwreg': the value; `mvreg': the concurrent values, sorted).
-spec get_register(atom(), term()) -> term() | {error, term()}.
get_register(Tab, Key) -> value(Tab, Key).
