%% @doc How an EC table keeps Mnesia's transactions out while its own server writes it.
%%
%% An EC table must change only through its CRDT: a `mnesia:transaction/1' that wrote one copy
%% would make the copies differ for good, silently. Stock Mnesia has no hook to refuse it, so
%% the refusal is Mnesia's own: the table is created `{access_mode, read_only}' (a persistent
%% property of the schema). For a read_only table Mnesia computes, on every node, no
%% write-lock targets (its `where_to_write' list is empty, and its `where_to_wlock' copy of
%% it), so the first write lock of a transaction aborts it with `{no_exists, Tab}': writes,
%% deletes, `delete_object', `s_write', table write locks, `mnesia:clear_table/1', and the
%% schema operations that write-lock the table (`mnesia:delete_table/1',
%% `mnesia:del_table_copy/2', `mnesia:restore/2').
%%
%% Mnesia recomputes those targets on many events: a node's Mnesia going down or coming up
%% (a crash, `mnesia:stop()', a partition, its heal), a copy loaded, added or removed, an
%% access mode changed. Every one of these recomputations honours `read_only', with one
%% exception, at creation: Mnesia (OTP 25) applies the read_only rule to a new
%% `local_content' table and then marks the creating node's copy writable anyway
%% (`mnesia_lib:set_local_content_whereabouts/1'). The table looks refused (the lock targets
%% are not recomputed yet), but the first recomputation, typically the next node down,
%% copies the writable mark into them, and from then on transactions write the surviving
%% copies locally and `mnesia:delete_table/1' deletes the table, leaving its helper tables.
%%
%% {@link close/1} undoes that one exception: it sets the table's write targets to what
%% Mnesia itself computes for a read_only table (nothing), inside Mnesia's controller, so that
%% no recomputation of the controller can interleave. After that, every recomputation Mnesia
%% makes keeps transactions refused, without any further action: the mechanism does not
%% depend on reacting to an event in time. Nothing is changed while the table is read_write
%% (`hypermnesia:delete_table/1' and `hypermnesia:del_table_copy/2' make it so for a moment).
%% {@link check/1} verifies the same invariant, and restores it if anything unforeseen broke
%% it: a safety net for the EC server to call on every tick (a few ETS lookups when all is
%% well). A node that loads the table after its creation (restart, copy added) gets it
%% refused from Mnesia directly.
%%
%% The server's own writes go the other way: Mnesia's dirty writes commit to the nodes in the
%% table's `where_to_commit' list, empty for a read_only table, so {@link open/1} puts the
%% local copy in it (and nothing else: transactions still find no node to lock).
%% Mnesia recomputes that list too (a replica change, an access mode change, a reload after a
%% local restart); the server's next write then aborts with `{no_exists, Tab}', and
%% {@link write/2} and {@link delete/2} reopen and write again. Dirty writes made by users
%% share that commit path: {@link hm_ec_dirty} replicates them.
%%
%% This relies on Mnesia internals, the same in OTP 25, 27 and 29 (the `mnesia_gvar' entries
%% named above, `mnesia_lib:set/2', `mnesia_controller:update/1'); `hm_ec_SUITE:
%% transactions_refused_across_events' exercises every event that recomputes them.
%% {@link self_check/0} verifies their shape when Hypermnesia starts, so that a Mnesia that
%% changed them is refused with a clear error instead of letting transactions through.
%%
%% What calls what:
%% <ul>
%% <li>`hypermnesia:create_table/2', once the table exists: {@link close_everywhere/1} (every
%%     running copy holder, including those without the hypermnesia application).</li>
%% <li>The EC server, when it takes up a table (and its table state is created): {@link
%%     open/1}.</li>
%% <li>The EC server, for every write and delete of a record in the table: {@link write/2},
%%     {@link delete/2}.</li>
%% <li>The EC server, on every tick, for every table it holds: {@link check/1}; log a warning
%%     when it returns `{reclosed, Tab}'. (A safety net only: transactions are refused without
%%     it; the server being rewritten is to call it.)</li>
%% </ul>
-module(hm_ec_mnesia).

-export([open/1, close/1, close_everywhere/1, check/1, is_closed/1, write/2, delete/2,
         with_lock_targets/2]).
-export([self_check/0, check_assumptions/2]).

%% What differs: a function Mnesia no longer exports, or one of its global variables (the
%% key, and the value found, or `missing').
-type assumption_failed() :: {missing_function, mfa()} | {gvar, term(), term()}.
-export_type([assumption_failed/0]).

-define(CONTROLLER_TIMEOUT_MS, 5000).
%% the tables with_lock_targets/2 opened for a schema operation (check/1 leaves them)
-define(OPEN_KEY, {?MODULE, lock_targets_open}).

%% @doc Take up the local copy of EC table `Tab' for the server's own writes: transactions
%% refused ({@link close/1}), the server's dirty writes reaching the local copy (and only it).
%% A table with no local copy (or unknown here) is left alone.
-spec open(atom()) -> ok.
open(Tab) ->
    ok = close(Tab),
    case is_local(Tab) of
        true ->
            mnesia_lib:set({Tab, where_to_commit},
                           [{node(), mnesia:table_info(Tab, storage_type)}]);
        false -> ok
    end,
    ok.

%% @doc Make sure transactions cannot write `Tab' on this node, now and after whatever Mnesia
%% recomputes later: its write targets become what Mnesia computes for a read_only table.
%% Does nothing for a table that is unknown here or not read_only. Runs inside Mnesia's
%% controller (at most a few seconds' wait, then directly).
-spec close(atom()) -> ok.
close(Tab) ->
    case is_closed(Tab) of
        true -> ok;
        false -> controlled(fun() -> close_here(Tab) end)
    end.

%% @doc {@link close/1} on every copy holder of `Tab' whose Mnesia is running (waits at most
%% 10 s for them; those that do not answer in time load the table refused when they restart).
-spec close_everywhere(atom()) -> ok.
close_everywhere(Tab) ->
    Holders = try mnesia:table_info(Tab, ram_copies) ++ mnesia:table_info(Tab, disc_copies)
              catch _:_ -> []
              end,
    Nodes = [N || N <- lists:usort(Holders),
                  lists:member(N, mnesia:system_info(running_db_nodes))],
    _ = erpc:multicall(Nodes, ?MODULE, close, [Tab], 10000),
    ok.

%% @doc Verify that transactions cannot write `Tab' on this node; if they could (something
%% unforeseen reopened it), close it again and say so.
-spec check(atom()) -> ok | {reclosed, atom()}.
check(Tab) ->
    case is_closed(Tab) orelse lists:member(Tab, persistent_term:get(?OPEN_KEY, [])) of
        true -> ok;
        false -> ok = close(Tab), {reclosed, Tab}
    end.

%% @doc Whether a transaction on this node would be refused any write lock on `Tab' now and
%% after Mnesia's next recomputation. `true' as well for a table that is unknown here or not
%% read_only (nothing to close).
-spec is_closed(atom()) -> boolean().
is_closed(Tab) ->
    case gvar({Tab, access_mode}) of
        {ok, read_only} ->
            gvar({Tab, where_to_write}) =:= {ok, []}
                andalso case gvar({Tab, where_to_wlock}) of
                            {ok, {[], _}} -> true;
                            {ok, _} -> false;
                            undefined -> true        % no lock target at all
                        end;
        _ -> true
    end.

%% @doc The server's write of `Record' to its local copy of `Tab'. If Mnesia recomputed the
%% commit targets since ({no_exists, Tab}), reopen and write again.
-spec write(atom(), tuple()) -> ok.
write(Tab, Record) -> reopening(Tab, fun() -> mnesia:dirty_write(Tab, Record) end).

%% @doc The server's delete of `Key' from its local copy of `Tab' (as {@link write/2}).
-spec delete(atom(), term()) -> ok.
delete(Tab, Key) -> reopening(Tab, fun() -> mnesia:dirty_delete(Tab, Key) end).

%% @doc Run `Fun' with the write-lock target of the `local_content' tables `Tabs' (EC
%% tables and their helper tables) on this node set to this node, then set back. Mnesia's
%% removal of a node that is down (`mnesia:del_table_copy(schema, Node)') write-locks every
%% table the node held a copy of, and Mnesia has no lock target for a `local_content' table
%% with no copy here, nor for a read_only one (an EC table): the removal would abort with
%% `{no_exists, Tab}'. The lock of a `local_content' table is a local matter: taken here, it
%% orders the removal against nothing else. Meanwhile a transaction on this node could
%% write-lock these tables too: the window is the schema operation's.
-spec with_lock_targets([atom()], fun(() -> R)) -> R.
with_lock_targets(Tabs, Fun) ->
    persistent_term:put(?OPEN_KEY, Tabs),
    Old = [{T, gvar({T, where_to_wlock})} || T <- Tabs],
    Set = fun(Values) ->
                  fun() ->
                          lists:foreach(fun({T, {ok, W}}) -> mnesia_lib:set({T, where_to_wlock}, W);
                                           ({_, undefined}) -> ok
                                        end, Values)
                  end
          end,
    try
        ok = controlled(Set([{T, {ok, {[node()], false}}} || T <- Tabs])),
        Fun()
    after
        ok = controlled(Set(Old)),
        _ = persistent_term:erase(?OPEN_KEY),
        lists:foreach(fun(T) -> ok = close(T) end, Tabs)
    end.

%% Run `Fun' in Mnesia's controller, or here when the controller does not answer in time.
controlled(Fun) ->
    case in_controller(Fun) of
        ok -> ok;
        _ -> Fun()
    end.

%% @doc Whether this node's Mnesia has the internals the refusal of transactions relies on:
%% `ok', or `{error, {unsupported_mnesia, MnesiaVsn, What}}' naming the first one that
%% differs. The functions are checked always; the shape of Mnesia's global variables (those
%% of its `schema' table, which every running Mnesia has) only while Mnesia runs.
-spec self_check() -> ok | {error, {unsupported_mnesia, string(), assumption_failed()}}.
self_check() ->
    Exported = fun({M, F, A}) ->
                       _ = code:ensure_loaded(M),
                       erlang:function_exported(M, F, A)
               end,
    Lookup = case mnesia:system_info(is_running) of
                 yes -> fun gvar/1;
                 _ -> none
             end,
    case check_assumptions(Exported, Lookup) of
        ok -> ok;
        {error, What} -> {error, {unsupported_mnesia, mnesia_vsn(), What}}
    end.

%% @doc The check of {@link self_check/0}, pure: `Exported' says whether a function exists,
%% `Lookup' reads one of Mnesia's global variables (`{ok, Value}' or `undefined'), or is
%% `none' to skip them.
-spec check_assumptions(fun((mfa()) -> boolean()),
                        fun((term()) -> {ok, term()} | undefined) | none) ->
          ok | {error, assumption_failed()}.
check_assumptions(Exported, Lookup) ->
    Missing = [{missing_function, MFA} || MFA <- internal_functions(), not Exported(MFA)],
    Shapes = case Lookup of
                 none -> [];
                 _ -> [{gvar, Key, found(V)} || {Key, Fits} <- gvar_shapes(),
                                                V <- [Lookup(Key)], not fits(Fits, V)]
             end,
    case Missing ++ Shapes of
        [] -> ok;
        [First | _] -> {error, First}
    end.

%% The functions of Mnesia this module and the membership's rejoin call.
internal_functions() ->
    [{mnesia_lib, set, 2}, {mnesia_controller, update, 1},
     {mnesia_controller, connect_nodes, 2}].

%% The global variables read and written here (and by the direct ETS path of the store), by
%% the shape of the `schema' table's entry.
gvar_shapes() ->
    [{{schema, access_mode}, fun(M) -> M =:= read_write orelse M =:= read_only end},
     {{schema, majority}, fun is_boolean/1},
     {{schema, where_to_write}, fun is_list/1},
     {{schema, where_to_wlock}, fun({Ns, Maj}) -> is_list(Ns) andalso is_boolean(Maj);
                                   (_) -> false
                                end},
     {{schema, where_to_commit}, fun(L) -> is_list(L) andalso
                                               lists:all(fun({N, S}) -> is_atom(N) andalso
                                                                            is_atom(S);
                                                            (_) -> false
                                                         end, L)
                                 end},
     {{schema, commit_work}, fun is_list/1},
     {{schema, storage_type}, fun is_atom/1}].

fits(Fits, {ok, V}) -> Fits(V);
fits(_, undefined) -> false.

found({ok, V}) -> V;
found(undefined) -> missing.

mnesia_vsn() ->
    _ = application:load(mnesia),
    case application:get_key(mnesia, vsn) of
        {ok, Vsn} -> Vsn;
        undefined -> "unknown"
    end.

%%% ------------------------------------------------------------- internals

reopening(Tab, Write) ->
    try Write()
    catch exit:{aborted, {no_exists, Tab}} ->
            ok = open(Tab),
            Write()
    end.

%% What Mnesia's controller computes for a read_only table (mnesia_controller:
%% add_active_replica/4 and update_where_to_wlock/1): no write targets. Checked again here,
%% in the controller, where Mnesia changes the access mode.
close_here(Tab) ->
    case gvar({Tab, access_mode}) of
        {ok, read_only} ->
            Majority = gvar({Tab, majority}) =:= {ok, true},
            mnesia_lib:set({Tab, where_to_write}, []),
            mnesia_lib:set({Tab, where_to_wlock}, {[], Majority});
        _ -> ok
    end,
    ok.

%% Run `Fun' in Mnesia's controller process, which makes the recomputations that read and
%% write these values: what it does is then never interleaved with them. From a process of
%% its own (the controller's call links to its caller), for a bounded time: during Mnesia's
%% start the controller holds calls back until the schema is merged.
in_controller(Fun) ->
    Self = self(),
    Tag = make_ref(),
    {Pid, Ref} = spawn_monitor(fun() -> Self ! {Tag, mnesia_controller:update(Fun)} end),
    receive
        {Tag, Result} -> erlang:demonitor(Ref, [flush]), Result;
        {'DOWN', Ref, process, Pid, Reason} -> {error, Reason}
    after ?CONTROLLER_TIMEOUT_MS ->
            exit(Pid, kill),
            receive {'DOWN', Ref, process, Pid, _} -> ok end,
            receive {Tag, _} -> ok after 0 -> ok end,     % answered just in time: dropped
            {error, timeout}
    end.

is_local(Tab) -> lists:member(Tab, hm_membership:mnesia_list(local_tables)).

%% One of Mnesia's global variables, or `undefined' (not set, or Mnesia not running).
gvar(Key) ->
    try ets:lookup(mnesia_gvar, Key) of
        [{_, V}] -> {ok, V};
        [] -> undefined
    catch error:badarg -> undefined
    end.
