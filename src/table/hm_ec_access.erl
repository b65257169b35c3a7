%% @doc The `mnesia_access' callback module behind `async_ec' and `sync_ec' (the new access
%% context of "Hypermnesia: Eventual Consistency in Mnesia", §3.1, on unmodified OTP:
%% `mnesia:activity(async_dirty, Fun, Args, hm_ec_access)').
%%
%% Inside the activity the user's ordinary `mnesia:*' calls reach these callbacks. For an EC
%% table, `write', `delete', `delete_object' and `clear_table' become operations of the
%% table's CRDT, applied here and broadcast ({@link hm_ec_server:submit/3}: on the key's
%% fragment for a partitioned table, through a holder when this node has no copy); every
%% read and query (`read', `select' with or without continuation, `match_object',
%% `index_read', `index_match_object', `all_keys', `foldl', `foldr', `first', `last', `next',
%% `prev', `table_info') runs unchanged on the local table, which holds exactly what reads
%% must show, or, for a partitioned table or one without a copy here, through
%% {@link hm_ec_frag}. Tables that are not EC tables fall through to plain Mnesia, or to
%% the access module given to {@link activity/4} (`mnesia_frag' for Mnesia's fragmented
%% tables, for instance).
%% A partitioned table takes `mnesia_frag''s names too: `table_info({Tab, Key}, Item)' is
%% about the fragment `Key' hashes to (`size' and `memory': the whole table); on a table with
%% a foreign key, `{Tab, ForeignKey}' reads and deletes in the fragment of `ForeignKey', and
%% a record is written to the fragment of its foreign-key attribute
%% ({@link hm_ec_frag:record_fragment/3}).
%%
%% Bad arguments abort the activity exactly as they do in `mnesia:async_dirty/1' on a plain
%% table (the same checks as `mnesia.erl', in the same order, with the same error terms):
%% `write' of something that is not a tuple of at least 3 elements aborts with
%% `{bad_type, Tab, Record, LockKind}', of a record of another name or size with
%% `{bad_type, Record}'; `delete_object' of something that is not such a tuple aborts with
%% `{bad_type, Tab}', of a record holding match variables (`'_'', `'$1'', see
%% `mnesia:has_var/1') with `{bad_type, Tab, Record}', and of a record of another name or
%% size returns `ok' and issues nothing (it matches nothing). A write the node's server refuses
%% aborts with `{ec_write_failed, Tab, Reason}'. On an `ordered_set' EC table a write or a
%% delete of a key holding a float of integral value aborts with `{bad_ec_key, Tab, Key}'
%% (see {@link is_exact_key/1}).
-module(hm_ec_access).

-export([activity/3, activity/4, is_exact_key/1]).
-export([lock/4, write/5, delete/5, delete_object/5, read/5, match_object/5, all_keys/4,
         index_match_object/6, index_read/6, table_info/4, select/5, select/6, select_cont/3,
         first/3, last/3, next/4, prev/4, foldl/6, foldr/6, clear_table/4]).

-define(MODE_KEY, hm_ec_mode).
%% the access module for tables that are not EC tables, when it is not `mnesia'
-define(INNER_KEY, hm_ec_inner).

%% A table, or `mnesia_frag''s name of the fragment of a foreign key: `{Tab, ForeignKey}'.
-type name() :: atom() | {atom(), term()}.

%% @doc Run `Fun(Args...)' in the `async_ec' (`async') or `sync_ec' (`sync') context:
%% `mnesia:activity(async_dirty, Fun, Args, hm_ec_access)' with the mode set for its writes.
-spec activity(async | sync, fun((...) -> R), list()) -> R.
activity(Mode, Fun, Args) ->
    Old = put(?MODE_KEY, Mode),
    try mnesia:activity(async_dirty, Fun, Args, ?MODULE)
    after
        restore(?MODE_KEY, Old)
    end.

%% @doc {@link activity/3} where tables that are not EC tables are accessed through the
%% `mnesia_access' module `Inner' (`mnesia', `mnesia_frag', or one of your own) instead of
%% plain Mnesia. An `Inner' that is not a loaded module with the callbacks exits with
%% `{aborted, {bad_access_module, Inner}}', and the fun does not run.
-spec activity(async | sync, fun((...) -> R), list(), module()) -> R.
activity(Mode, Fun, Args, Inner) when Inner =:= mnesia; Inner =:= ?MODULE ->
    activity(Mode, Fun, Args);
activity(Mode, Fun, Args, Inner) ->
    is_atom(Inner) andalso code:ensure_loaded(Inner) =:= {module, Inner}
        andalso erlang:function_exported(Inner, write, 5)
        orelse exit({aborted, {bad_access_module, Inner}}),
    Old = put(?INNER_KEY, Inner),
    try activity(Mode, Fun, Args)
    after
        restore(?INNER_KEY, Old)
    end.

restore(Key, undefined) -> erase(Key);
restore(Key, Old) -> put(Key, Old).

%% The access module for tables that are not EC tables.
inner() ->
    case get(?INNER_KEY) of
        undefined -> mnesia;
        Inner -> Inner
    end.

%%% ------------------------------------------------------------- writes

-spec write(term(), term(), name(), tuple(), atom()) -> ok.
write(Tid, Ts, Name, Val, LockKind) ->
    case ec(Name) of
        false -> (inner()):write(Tid, Ts, Name, Val, LockKind);
        {Tab, Opts} ->
            %% mnesia:write/5 then mnesia_lib:validate_record/2, as in async_dirty (the lock
            %% kind is not checked there, and a record may hold '_' or '$1' as a value)
            case {is_record_tuple(Val), is_record_tuple(Val) andalso fits(Tab, Val)} of
                {false, _} -> mnesia:abort({bad_type, Tab, Val, LockKind});
                {true, false} -> mnesia:abort({bad_type, Val});
                {true, true} ->
                    ok = check_key(Tab, element(2, Val), Opts),
                    submit_to(Tid, hm_ec_frag:record_fragment(Tab, Val, Opts),
                              {element(2, Val), {write, Val}})
            end
    end.

-spec delete(term(), term(), name(), term(), atom()) -> ok.
delete(Tid, Ts, Name, Key, LockKind) ->
    case ec(Name) of
        false -> (inner()):delete(Tid, Ts, Name, Key, LockKind);
        {Tab, Opts} ->
            ok = check_key(Tab, Key, Opts),
            case hm_ec_frag:key_fragments(Name, Key, Opts) of
                {error, Reason} -> mnesia:abort(Reason);
                Frags -> lists:foreach(fun(F) -> submit_to(Tid, F, {Key, delete}) end, Frags)
            end
    end.

-spec delete_object(term(), term(), name(), tuple(), atom()) -> ok.
delete_object(Tid, Ts, Name, Val, LockKind) ->
    case ec(Name) of
        false -> (inner()):delete_object(Tid, Ts, Name, Val, LockKind);
        {Tab, Opts} ->
            %% mnesia:delete_object/5: a pattern is not an object
            case is_record_tuple(Val) andalso {mnesia:has_var(Val), fits(Tab, Val)} of
                false -> mnesia:abort({bad_type, Tab});
                {true, _} -> mnesia:abort({bad_type, Tab, Val});
                {false, true} ->
                    ok = check_key(Tab, element(2, Val), Opts),
                    submit_to(Tid, hm_ec_frag:record_fragment(Tab, Val, Opts),
                              {element(2, Val), {delete_object, Val}});
                {false, false} -> ok       % as in Mnesia: it matches nothing, anywhere, ever
            end
    end.

-spec clear_table(term(), term(), name(), term()) -> ok.
clear_table(Tid, Ts, Name, Obj) ->
    case ec(Name) of
        false -> (inner()):clear_table(Tid, Ts, Name, Obj);
        {Tab, Opts} ->
            lists:foreach(fun(Frag) -> submit_to(Tid, Frag, {'$all', clear}) end,
                          hm_ec_frag:fragments(Tab, Opts))
    end.

%% The table and its EC options, or false for a table that is not an EC table (looked up
%% once per call: they also say where the key's fragment is). `{Tab, ForeignKey}' is
%% `mnesia_frag''s name for the fragment of `ForeignKey' of `Tab'.
ec(Tab) when is_atom(Tab) ->
    case hm_ec_registry:ec_options(Tab) of
        {ok, Opts} -> {Tab, Opts};
        error -> false
    end;
ec({Tab, _ForeignKey}) when is_atom(Tab) -> ec(Tab);
ec(_) -> false.

%% An `ordered_set' EC table refuses a key holding a float of integral value.
check_key(Tab, Key, #{order := ordered_set}) ->
    case is_exact_key(Key) of
        true -> ok;
        false -> mnesia:abort({bad_ec_key, Tab, Key})
    end;
check_key(_Tab, _Key, _Opts) -> ok.

%% @doc Whether `Key' holds no float of integral value (`1.0', `-0.0', `2.0e9'). An
%% `ordered_set' compares keys with `==', so `1' and `1.0' are one key there, while an EC
%% table's copies tell keys apart exactly (`=:='): two such keys written concurrently on two
%% copies would leave each copy with the one it applied last. Without them, two keys are
%% `==' only when they are `=:=', and every copy agrees.
-spec is_exact_key(term()) -> boolean().
is_exact_key(F) when is_float(F) -> F /= trunc(F);
is_exact_key(T) when is_tuple(T) -> is_exact_key(tuple_to_list(T));
is_exact_key([H | T]) -> is_exact_key(H) andalso is_exact_key(T);
is_exact_key(M) when is_map(M) -> is_exact_key(maps:to_list(M));
is_exact_key(_) -> true.

%% What mnesia:write/5 and mnesia:delete_object/5 accept at all.
is_record_tuple(Val) -> is_tuple(Val) andalso tuple_size(Val) > 2.

%% The table's record name and arity (mnesia_lib:validate_record/2).
fits(Tab, Val) ->
    tuple_size(Val) =:= mnesia:table_info(Tab, arity)
        andalso element(1, Val) =:= mnesia:table_info(Tab, record_name).

%% Without the node's server (the hypermnesia application is not running here) a write aborts
%% as Mnesia's activities do where Mnesia does not run: {node_not_running, Node}, at once.
submit_to(Tid, Tab, KeyOp) ->
    Mode = case get(?MODE_KEY) of
               sync -> sync;
               _ -> async
           end,
    case whereis(hm_ec_server) of
        undefined -> not_running(Tid);
        _ ->
            try hm_ec_server:submit(Tab, KeyOp, Mode) of
                ok -> ok;
                {error, Reason} -> mnesia:abort({ec_write_failed, Tab, Reason})
            catch
                %% stopped meanwhile (a crash keeps its own reason)
                exit:{Gone, {gen_server, call, _}} when Gone =:= noproc; Gone =:= normal;
                                                        Gone =:= shutdown ->
                    not_running(Tid);
                exit:{{shutdown, _}, {gen_server, call, _}} ->
                    not_running(Tid)
            end
    end.

%% Inside a transaction (clear_table/1 runs one, and so does mnesia:transaction/1 nested in
%% async_ec) Mnesia restarts one that aborts with node_not_running, forever: the remote node
%% it means may come back. This node's server will not, by itself: Mnesia's `{abort, Reason}'
%% form ends the transaction with `{aborted, Reason}' at once.
-spec not_running(term()) -> no_return().
not_running(Tid) when element(1, Tid) =:= tid -> exit({abort, {node_not_running, node()}});
not_running(_) -> mnesia:abort({node_not_running, node()}).

%%% ------------------------------------------------------------- reads

-spec lock(term(), term(), term(), atom()) -> term().
lock(Tid, Ts, LockItem, LockKind) -> (inner()):lock(Tid, Ts, LockItem, LockKind).

%% A table that is not an EC table, or an EC table in one piece with a copy here, is read by
%% Mnesia itself; an EC table in fragments, or without a copy here, through hm_ec_frag.
-spec read(term(), term(), name(), term(), atom()) -> [tuple()].
read(Tid, Ts, Tab, Key, LockKind) ->
    case hm_ec_frag:route(Tab) of
        local -> (inner()):read(Tid, Ts, Tab, Key, LockKind);
        Route -> hm_ec_frag:read(Route, Tid, Ts, Key, LockKind)
    end.

-spec match_object(term(), term(), name(), tuple(), atom()) -> [tuple()].
match_object(Tid, Ts, Tab, Pat, LockKind) ->
    case hm_ec_frag:route(Tab) of
        local -> (inner()):match_object(Tid, Ts, Tab, Pat, LockKind);
        Route -> hm_ec_frag:select(Route, Tid, Ts, [{Pat, [], ['$_']}], LockKind)
    end.

-spec all_keys(term(), term(), name(), atom()) -> [term()].
all_keys(Tid, Ts, Tab, LockKind) ->
    case hm_ec_frag:route(Tab) of
        local -> (inner()):all_keys(Tid, Ts, Tab, LockKind);
        Route -> hm_ec_frag:all_keys(Route, Tid, Ts, LockKind)
    end.

-spec index_match_object(term(), term(), name(), tuple(), term(), atom()) -> [tuple()].
index_match_object(Tid, Ts, Tab, Pat, Attr, LockKind) ->
    case hm_ec_frag:route(Tab) of
        local -> (inner()):index_match_object(Tid, Ts, Tab, Pat, Attr, LockKind);
        Route -> hm_ec_frag:index_match_object(Route, Tid, Ts, Pat, Attr, LockKind)
    end.

-spec index_read(term(), term(), name(), term(), term(), atom()) -> [tuple()].
index_read(Tid, Ts, Tab, Key, Attr, LockKind) ->
    case hm_ec_frag:route(Tab) of
        local -> (inner()):index_read(Tid, Ts, Tab, Key, Attr, LockKind);
        Route -> hm_ec_frag:index_read(Route, Tid, Ts, Key, Attr, LockKind)
    end.

-spec table_info(term(), term(), name(), atom()) -> term().
table_info(Tid, Ts, {Tab, Key} = Name, Item) when is_atom(Tab) ->
    %% as mnesia_frag: `size' and `memory' of the whole table, anything else of the
    %% fragment `Key' hashes to (with or without a foreign key)
    case ec(Name) of
        false -> mnesia:abort({bad_type, Name});            % as mnesia:table_info/2
        _ when Item =:= size; Item =:= memory -> table_info(Tid, Ts, Tab, Item);
        {Tab, Opts} -> mnesia:table_info(Tid, Ts, hm_ec_frag:fragment_table(Tab, Key, Opts), Item)
    end;
table_info(Tid, Ts, Tab, Item) when Item =:= size; Item =:= memory ->
    case hm_ec_frag:route(Tab) of
        local -> (inner()):table_info(Tid, Ts, Tab, Item);
        Route -> hm_ec_frag:table_info(Route, Tid, Ts, Item)
    end;
%% anything else is the table's own (and the registry's lookups, made from inside the
%% activity, come through here: they must not route)
table_info(Tid, Ts, Tab, Item) -> (inner()):table_info(Tid, Ts, Tab, Item).

-spec select(term(), term(), name(), ets:match_spec(), atom()) -> [term()].
select(Tid, Ts, Tab, Spec, LockKind) ->
    case hm_ec_frag:route(Tab) of
        local -> (inner()):select(Tid, Ts, Tab, Spec, LockKind);
        Route -> hm_ec_frag:select(Route, Tid, Ts, Spec, LockKind)
    end.

-spec select(term(), term(), name(), ets:match_spec(), pos_integer(), atom()) ->
          {[term()], term()} | '$end_of_table'.
select(Tid, Ts, Tab, Spec, Limit, LockKind) ->
    case hm_ec_frag:route(Tab) of
        local -> (inner()):select(Tid, Ts, Tab, Spec, Limit, LockKind);
        Route -> hm_ec_frag:select(Route, Tid, Ts, Spec, Limit, LockKind)
    end.

-spec select_cont(term(), term(), term()) -> {[term()], term()} | '$end_of_table'.
select_cont(Tid, Ts, Cont) when element(1, Cont) =:= hm_ec_frag_cont ->
    hm_ec_frag:select_cont(Tid, Ts, Cont);
select_cont(Tid, Ts, Cont) -> (inner()):select_cont(Tid, Ts, Cont).

-spec first(term(), term(), name()) -> term().
first(Tid, Ts, Tab) ->
    case hm_ec_frag:route(Tab) of
        local -> (inner()):first(Tid, Ts, Tab);
        Route -> hm_ec_frag:first(Route, Tid, Ts)
    end.

-spec last(term(), term(), name()) -> term().
last(Tid, Ts, Tab) ->
    case hm_ec_frag:route(Tab) of
        local -> (inner()):last(Tid, Ts, Tab);
        Route -> hm_ec_frag:last(Route, Tid, Ts)
    end.

-spec next(term(), term(), name(), term()) -> term().
next(Tid, Ts, Tab, Key) ->
    case hm_ec_frag:route(Tab) of
        local -> (inner()):next(Tid, Ts, Tab, Key);
        Route -> hm_ec_frag:next(Route, Tid, Ts, Key)
    end.

-spec prev(term(), term(), name(), term()) -> term().
prev(Tid, Ts, Tab, Key) ->
    case hm_ec_frag:route(Tab) of
        local -> (inner()):prev(Tid, Ts, Tab, Key);
        Route -> hm_ec_frag:prev(Route, Tid, Ts, Key)
    end.

-spec foldl(term(), term(), fun((term(), Acc) -> Acc), Acc, name(), atom()) -> Acc.
foldl(Tid, Ts, Fun, Acc, Tab, LockKind) ->
    case hm_ec_frag:route(Tab) of
        local -> (inner()):foldl(Tid, Ts, Fun, Acc, Tab, LockKind);
        Route -> hm_ec_frag:foldl(Route, Tid, Ts, Fun, Acc, LockKind)
    end.

-spec foldr(term(), term(), fun((term(), Acc) -> Acc), Acc, name(), atom()) -> Acc.
foldr(Tid, Ts, Fun, Acc, Tab, LockKind) ->
    case hm_ec_frag:route(Tab) of
        local -> (inner()):foldr(Tid, Ts, Fun, Acc, Tab, LockKind);
        Route -> hm_ec_frag:foldr(Route, Tid, Ts, Fun, Acc, LockKind)
    end.
