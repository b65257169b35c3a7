%% @doc The key-value API of EC tables, partitioned or not: `get' with a read quorum returns
%% the concurrent records of a key and an opaque causal context; `put' and `delete' take that
%% context and supersede exactly the records it names ("Dynamo: Amazon's Highly Available
%% Key-value Store", §4.4–4.5, and the get/put of "DottedDB: Anti-Entropy without Merkle
%% Trees, Deletes without Tombstones", §III).
%%
%% On a table with `{conflict, siblings}' concurrent writes of a key stay side by side and
%% `get' returns them all; a `put' with the context of that `get' replaces them with one
%% record, while a write `get' has not seen survives beside it. With `term_order' or `lww'
%% a key shows one record, chosen the same way on every copy.
%%
%% `{r, R}' (default 1): answers from `R' holders of the key, merged by union, not by the
%% table's policy: while those copies differ, a `term_order' or `lww' key shows each copy's
%% record, and a record one copy already replaced or deleted shows if another has it (which
%% one wins is decided by timestamps and causal order that the records do not carry);
%% `{w, W}' (default 1):
%% `W' > 1 waits, as `sync_ec' does, until every reachable holder applied the write, and is
%% refused before writing when fewer than `W' holders can be reached. A node that holds no
%% copy reads and writes through the holders, and with `R' = `W' = 1 falls back on its hints
%% when none is reachable (see {@link hm_ec_hints}).
%%
%% On a partitioned table created with `{replication, dotted}' the three calls are
%% DottedDB's own ({@link hm_dotted_server}): the context is the merged causal context of
%% the copies that answered, and a put or delete supersedes exactly the versions it covers.
%%
%% Invariants: a context names the table, the key and the records its `get' returned (by
%% their SHA-256 digests); a `put' or `delete' with it removes those records and no other.
-module(hm_kv).

-export([get/3, put/4, delete/4]).
-export_type([context/0]).

-define(TIMEOUT, 10000).

-opaque context() :: binary().

%% @doc The records of `Key' and a context for a later `put' or `delete'. Errors:
%% `{not_ec_table, Tab}', `{bad_option, Opt}', `{insufficient_replicas, R, Reachable}',
%% `{not_supported, {foreign_key, Tab}}' (a table with a foreign key: a key alone does not
%% say which fragment holds its records).
-spec get(atom(), term(), [{r, pos_integer()}]) ->
          {ok, [tuple()], context()} | {error, term()}.
get(Tab, Key, Opts) ->
    with_checks(Tab, Opts, r, fun(R) -> get_(Tab, Key, R) end).

get_(Tab, Key, R) ->
    case hm_dotted_server:is_dotted(Tab) of
        true -> hm_dotted_server:get(Tab, Key, R);
        false -> get_tcsb(Tab, Key, R)
    end.

get_tcsb(Tab, Key, R) ->
    Frag = hm_ec_frag:fragment_table(Tab, Key),
    Sources = sources(Frag),
    case read_from(Sources, Frag, Key, R, 0, []) of
        {ok, Records} ->
            Shown = lists:usort(hm_ec_hints:apply_key(Frag, Key, Records)),
            {ok, Shown, context(Tab, Key, Shown)};
        {error, _} = E ->
            case {R, hm_ec_hints:pending(Frag)} of
                {1, [_ | _]} ->
                    Shown = lists:usort(hm_ec_hints:apply_key(Frag, Key, [])),
                    {ok, Shown, context(Tab, Key, Shown)};
                _ -> E
            end
    end.

%% @doc Write `Record', superseding the records `Context' names (`undefined': none but what
%% the holder has seen). Errors: those of {@link get/3}, `{bad_context, Context}',
%% `{bad_type, Record}', and a refused write's reason.
-spec put(atom(), tuple(), context() | undefined, [{w, pos_integer()}]) -> ok | {error, term()}.
put(Tab, Record, Context, Opts) ->
    with_checks(Tab, Opts, w, fun(W) ->
        case is_tuple(Record) andalso tuple_size(Record) > 2
            andalso tuple_size(Record) =:= mnesia:table_info(Tab, arity)
            andalso element(1, Record) =:= mnesia:table_info(Tab, record_name) of
            false -> {error, {bad_type, Record}};
            true -> put_(Tab, Record, Context, W)
        end
    end).

put_(Tab, Record, Context, W) ->
    case hm_dotted_server:is_dotted(Tab) of
        true -> hm_dotted_server:put(Tab, Record, Context, W);
        false ->
            Key = element(2, Record),
            with_context(Tab, Key, Context, W, fun(Seen) ->
                [mnesia:delete_object(R) || R <- Seen, R =/= Record],
                mnesia:write(Record)
            end)
    end.

%% @doc Delete the records of `Key' that `Context' names (`undefined': every record the
%% holder has seen). Errors: as {@link put/4}.
-spec delete(atom(), term(), context() | undefined, [{w, pos_integer()}]) -> ok | {error, term()}.
delete(Tab, Key, Context, Opts) ->
    with_checks(Tab, Opts, w, fun(W) ->
        case hm_dotted_server:is_dotted(Tab) of
            true -> hm_dotted_server:delete(Tab, Key, Context, W);
            false ->
                with_context(Tab, Key, Context, W, fun(Seen) ->
                    case Context of
                        undefined -> mnesia:delete({Tab, Key});
                        _ -> [mnesia:delete_object(R) || R <- Seen], ok
                    end
                end)
        end
    end).

%%% ---------------------------------------------------------------- internal

with_checks(Tab, Opts, Quorum, Fun) ->
    case {hm_ec_registry:is_ec_table(Tab), is_list(Opts)} of
        {false, _} -> {error, {not_ec_table, Tab}};
        {true, false} -> {error, {bad_option, Opts}};
        {true, true} ->
            case hm_partition:properties(Tab) of
                {ok, #{foreign_key := _}} -> {error, {not_supported, {foreign_key, Tab}}};
                _ -> with_quorum(Opts, Quorum, Fun)
            end
    end.

with_quorum(Opts, Quorum, Fun) ->
    case [O || O <- Opts, not (is_tuple(O) andalso tuple_size(O) =:= 2
                               andalso element(1, O) =:= Quorum
                               andalso is_integer(element(2, O))
                               andalso element(2, O) >= 1)] of
        [Bad | _] -> {error, {bad_option, Bad}};
        [] -> Fun(proplists:get_value(Quorum, Opts, 1))
    end.

with_context(Tab, Key, Context, W, Write) ->
    case seen(Tab, Key, Context) of
        {ok, Seen} ->
            Frag = hm_ec_frag:fragment_table(Tab, Key),
            Reachable = length(sources(Frag)),
            case W =< 1 orelse Reachable >= W of
                false -> {error, {insufficient_replicas, W, Reachable}};
                true ->
                    Mode = case W of 1 -> async; _ -> sync end,
                    try hm_ec_access:activity(Mode, fun() -> _ = Write(Seen), ok end, [])
                    catch exit:{aborted, Reason} -> {error, Reason}
                    end
            end;
        error -> {error, {bad_context, Context}}
    end.

%% The records a context names that are still there (a context holds digests, never terms
%% to decode: nothing in it can create atoms).
seen(_Tab, _Key, undefined) -> {ok, []};
seen(Tab, Key, Context) when is_binary(Context) ->
    Which = digest({Tab, Key}),
    try binary_to_term(Context, [safe]) of
        {hm_kv, 1, Which, Digests} when is_list(Digests) ->
            case get(Tab, Key, []) of
                {ok, Now, _} -> {ok, [R || R <- Now, lists:member(digest(R), Digests)]};
                {error, _} -> {ok, []}
            end;
        _ -> error
    catch error:badarg -> error
    end;
seen(_, _, _) -> error.

context(Tab, Key, Records) ->
    term_to_binary({hm_kv, 1, digest({Tab, Key}), [digest(R) || R <- Records]}).

digest(Term) -> crypto:hash(sha256, term_to_binary(Term)).

%% This node first when it holds a copy, then the reachable holders.
sources(Frag) ->
    [node() || hm_ec_frag:is_local(Frag)] ++ hm_ec_frag:holders(Frag).

%% Answers from `R' sources, `Got' so far.
read_from(_Sources, _Frag, _Key, R, Got, Acc) when Got >= R -> {ok, Acc};
read_from([], _Frag, _Key, R, Got, _Acc) -> {error, {insufficient_replicas, R, Got}};
read_from([N | Ns], Frag, Key, R, Got, Acc) ->
    try case N =:= node() of
            true -> mnesia:dirty_read(Frag, Key);
            false -> erpc:call(N, mnesia, dirty_read, [Frag, Key], ?TIMEOUT)
        end of
        Records -> read_from(Ns, Frag, Key, R, Got + 1, Acc ++ Records)
    catch _:_ -> read_from(Ns, Frag, Key, R, Got, Acc)
    end.
