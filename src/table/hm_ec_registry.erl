%% @doc The registry of EC tables: what makes a Mnesia table an EC table, and the changes to
%% one (creation with its helper tables, deletion, copies added and removed, restore from a
%% backup). An EC table is a Mnesia table whose `user_properties' hold `{hm_ec, #{type,
%% conflict, meta, log}}', written only by {@link create_table/2}; its helper tables
%% `hm_meta_Tab' and `hm_log_Tab' hold, per copy, the metadata of unstable keys and (on disc)
%% the log of unstable operations. The facade {@link hypermnesia} delegates to this module;
%% the table layer reads the registry through {@link is_ec_table/1} and {@link ec_options/1}.
%%
%% Every change keeps transactions refused on the table (`access_mode' `read_only', closed by
%% {@link hm_ec_mnesia} on every copy holder), switching to `read_write' only for Mnesia's own
%% schema operations that need it, and tells the copy holders' EC servers at once.
-module(hm_ec_registry).

-export([create_table/2, delete_table/1, add_table_copy/3, del_table_copy/2, restore/2,
         is_ec_table/1, ec_options/1]).
-export([is_options/1, ec_type/1, ec_spec/1, create_table/3, wait_ready/1, add_copy/3, del_copy/2, copy_nodes/1]).

-define(PROP, hm_ec).
-define(READY_WAIT_MS, 5000).

%% @doc Create a table. With `{ec, pawset | prwset}' (or, the older form, `{type, pawset |
%% prwset}') it is an EC table; the other options are Mnesia's own, with Mnesia's meaning
%% (`attributes', `record_name', `index', `ram_copies', `disc_copies', `{type, set |
%% ordered_set}' (default `set'), ...), plus `{conflict, term_order | lww | siblings}' (default
%% `term_order'). Without an EC type this is `mnesia:create_table/2'. What an EC table
%% refuses is in {@link ec_spec/1} and {@link create_table/3}.
-spec create_table(atom(), [tuple()]) -> {atomic, ok} | {aborted, term()}.
create_table(Tab, Opts) when is_atom(Tab), is_list(Opts) ->
    case is_options(Opts) of
        true -> create_table_checked(Tab, Opts);
        false -> {aborted, {badarg, Tab, Opts}}
    end;
create_table(Tab, Opts) -> {aborted, {badarg, Tab, Opts}}.

%% @doc Whether `Opts' is a proper list of non-empty tuples, the shape {@link create_table/2}
%% takes (Mnesia's own check comes later, per option). The other ways in
%% (`hm_crdt_table', `hm_partition') hand a list of another shape to {@link create_table/2},
%% which refuses it with `{aborted, {badarg, Tab, Opts}}', as `mnesia:create_table/2' does.
-spec is_options(term()) -> boolean().
is_options(Opts) ->
    is_proper_list(Opts) andalso lists:all(fun(O) -> is_tuple(O) andalso tuple_size(O) >= 1 end,
                                           Opts).

%% Whether `L' is a proper list (option lists are checked with it before they are searched).
is_proper_list(L) ->
    try length(L) of _ -> true
    catch error:badarg -> false
    end.

%% @doc The EC type an option list (a proper list of tuples) asks for, pure: the value of
%% `{ec, Type}', or of `{type, pawset | prwset}' (the older form), or `none' (a plain Mnesia
%% table). `{error, Option}' for an `ec' option that is not `pawset' or `prwset', or given
%% twice.
-spec ec_type([tuple()]) -> pawset | prwset | none | {error, tuple()}.
ec_type(Opts) ->
    case {[E || {ec, E} <- Opts], [T || {type, T} <- Opts, T =:= pawset orelse T =:= prwset]} of
        {[], []} -> none;
        {[], [T | _]} -> T;
        {[E], _} when E =:= pawset; E =:= prwset -> E;
        {[E], _} -> {error, {ec, E}};
        {[_, E | _], _} -> {error, {ec, E}}
    end.

%% @doc What an EC table's options ask of Mnesia, pure: `{ok, EcType, MnesiaType}' with the
%% Mnesia type of its storage (`set', `ordered_set', or `bag' for `{conflict, siblings}'), or
%% `{error, Option}' naming the first option refused. An EC table is a `set' or an
%% `ordered_set' (`{type, set | ordered_set}' beside `{ec, _}'; `{type, pawset | prwset}'
%% alone is a `set'); it is never a Mnesia `bag' (`{type, bag}': `{conflict, siblings}'
%% shows concurrent versions instead), and a `siblings' table is never an `ordered_set'
%% (Mnesia has no ordered bag). Refused too: a second `type', `local_content',
%% `disc_only_copies', `majority', `access_mode', and a conflict policy other than
%% `term_order', `lww' and `siblings'.
-spec ec_spec([tuple()]) -> {ok, pawset | prwset, set | ordered_set | bag} | {error, tuple()}.
ec_spec(Opts) ->
    Policy = proplists:get_value(conflict, Opts, term_order),
    Fixed = [O || O <- Opts, lists:member(element(1, O), [local_content, disc_only_copies,
                                                          majority, access_mode])],
    case {ec_type(Opts), lists:member(Policy, [term_order, lww, siblings]), Fixed} of
        {none, _, _} -> {error, {ec, none}};
        {{error, _} = E, _, _} -> E;
        {_, false, _} -> {error, {conflict, Policy}};
        {_, _, [O | _]} -> {error, O};
        {Ec, true, []} ->
            case {mnesia_type(Ec, [T || {type, T} <- Opts]), Policy} of
                {{error, _} = E, _} -> E;
                {{ok, ordered_set}, siblings} -> {error, {type, ordered_set}};
                {{ok, _}, siblings} -> {ok, Ec, bag};
                {{ok, MT}, _} -> {ok, Ec, MT}
            end
    end.

%% The Mnesia type asked for beside EC type `Ec' (`Types': the values of every `type'
%% option).
mnesia_type(_Ec, []) -> {ok, set};
mnesia_type(Ec, [Ec]) -> {ok, set};
mnesia_type(_Ec, [T]) when T =:= set; T =:= ordered_set -> {ok, T};
mnesia_type(_Ec, [T]) -> {error, {type, T}};
mnesia_type(Ec, [Ec, T | _]) -> {error, {type, T}};
mnesia_type(_Ec, [_, T | _]) -> {error, {type, T}}.

create_table_checked(Tab, Opts) ->
    case ec_type(Opts) of
        none ->
            case lists:keymember(conflict, 1, Opts) of
                true -> {aborted, {bad_ec_option, Tab, {conflict, without_ec_type}}};
                false -> mnesia:create_table(Tab, Opts)
            end;
        _ -> create_ec_table(Tab, Opts, #{}, wait)
    end.

%% @doc Create EC table `Tab' (options as for {@link create_table/2}) with `Extra' added to
%% its EC options, without waiting for its copies to be ready (see {@link wait_ready/1}):
%% the fragments of a partitioned table are made this way. A fragment (`Extra' has `frag')
%% is never an `ordered_set': the order of a table split by key hash would hold within
%% each fragment only. Errors: `{aborted, {bad_ec_option, Tab, Option}}' (see
%% {@link ec_spec/1}), `{aborted, {not_active, Tab, Node}}', and Mnesia's.
-spec create_table(atom(), [tuple()], map()) -> {atomic, ok} | {aborted, term()}.
create_table(Tab, Opts, Extra) when is_atom(Tab), is_list(Opts), is_map(Extra) ->
    create_ec_table(Tab, Opts, Extra, no_wait).

create_ec_table(Tab, Opts, Extra, Wait) ->
    Copies = [{K, V} || {K, V} <- Opts, K =:= ram_copies orelse K =:= disc_copies],
    case {ec_spec(Opts), not_db_nodes(Copies)} of
        {{error, Bad}, _} -> {aborted, {bad_ec_option, Tab, Bad}};
        {{ok, _, ordered_set}, _} when is_map_key(frag, Extra) ->
            {aborted, {bad_ec_option, Tab, {type, ordered_set}}};
        {{ok, _, _}, [Node | _]} ->
            %% Mnesia accepts a ram copy there (and never loads it); an EC copy there would
            %% never catch up and would hold back the others' stability for good. Mnesia's
            %% own answer for a disc copy on a node it does not run on.
            {aborted, {not_active, Tab, Node}};
        {{ok, Type, MnesiaType}, []} ->
            Policy = proplists:get_value(conflict, Opts, term_order),
            Meta = meta_table(Tab),
            Log = log_table(Tab),
            UserOpts = [O || O = {K, _} <- Opts, K =/= type, K =/= conflict, K =/= ec],
            Order = case MnesiaType of
                        ordered_set -> #{order => ordered_set};
                        _ -> #{}
                    end,
            Props = maps:merge(maps:merge(Extra, Order),
                               #{type => Type, conflict => Policy, meta => Meta, log => Log}),
            %% read_only: Mnesia's transactions cannot write it (hm_ec_server opens it for
            %% its own dirty writes only)
            StorageOpts = [{local_content, true}, {access_mode, read_only},
                           {type, MnesiaType},
                           {user_properties, [{?PROP, Props}]} | UserOpts],
            MetaOpts = [{local_content, true}, {record_name, hm_meta},
                        {attributes, [key, state]} | Copies],
            LogOpts = [{local_content, true}, {record_name, hm_log},
                       {attributes, [key, value]} | Copies],
            create_all([{Meta, MetaOpts}, {Log, LogOpts}, {Tab, StorageOpts}], Tab, [], Wait)
    end.

%% Copy holders named that are not Mnesia db nodes (checked while Mnesia runs here; if it does
%% not, mnesia:create_table/2 answers node_not_running).
not_db_nodes(Copies) ->
    case mnesia:system_info(is_running) of
        yes ->
            DbNodes = mnesia:system_info(db_nodes),
            [N || {_, Ns} <- Copies, is_list(Ns), N <- Ns, not lists:member(N, DbNodes)];
        _ -> []
    end.

%% The helper tables first, the table itself last (it is what makes the table an EC table);
%% on failure the ones created are removed.
create_all([], Tab, _Done, Wait) ->
    %% Mnesia marks a new local_content copy writable despite read_only: closed on every
    %% copy holder now, so that no later recomputation lets transactions write it
    ok = hm_ec_mnesia:close_everywhere(Tab),
    refresh_servers(Tab),
    %% a new copy refuses writes until it has caught up (hm_ec_server); the copies of a new
    %% table release each other within a tick or two when they can all talk
    _ = Wait =:= wait andalso wait_ready([Tab]),
    {atomic, ok};
create_all([{T, Opts} | Rest], Tab, Done, Wait) ->
    case mnesia:create_table(T, Opts) of
        {atomic, ok} -> create_all(Rest, Tab, [T | Done], Wait);
        Aborted ->
            _ = [mnesia:delete_table(D) || D <- Done],
            case Aborted of
                {aborted, {already_exists, _}} -> {aborted, {already_exists, Tab}};
                _ -> Aborted
            end
    end.

meta_table(Tab) -> list_to_atom("hm_meta_" ++ atom_to_list(Tab)).
log_table(Tab) -> list_to_atom("hm_log_" ++ atom_to_list(Tab)).

%% The tables behind an EC table: helpers first.
helpers(#{meta := Meta, log := Log}) -> [Meta, Log].

%% Tell every copy holder's server about the table now rather than at its next refresh.
refresh_servers(Tab) -> refresh_servers_on(copy_nodes(Tab)).

%% @doc Wait until every reachable copy of the tables is ready, for at most 5 s (a copy that
%% cannot reach all the others stays syncing until it can: create_table/2 returns anyway).
-spec wait_ready([atom()]) -> ok.
wait_ready(Tabs) ->
    Deadline = erlang:monotonic_time(millisecond) + ?READY_WAIT_MS,
    lists:foreach(fun(Tab) -> wait_ready(Tab, Deadline) end, Tabs).

wait_ready(Tab, Deadline) ->
    Syncing = [N || N <- copy_nodes(Tab), N =:= node() orelse lists:member(N, nodes()),
                    try gen_server:call({hm_ec_server, N}, {info, Tab}, 5000) of
                        #{status := syncing} -> true;
                        {error, {not_ec_table, _}} -> true;     % not taken up yet
                        _ -> false                              % ready
                    catch exit:_ -> false      % no server there (application not running)
                    end],
    case Syncing =/= [] andalso erlang:monotonic_time(millisecond) < Deadline of
        true -> timer:sleep(20), wait_ready(Tab, Deadline);
        false -> ok
    end.

%% @doc The nodes holding a copy of `Tab', from Mnesia's schema.
-spec copy_nodes(atom()) -> [node()].
copy_nodes(Tab) -> mnesia:table_info(Tab, ram_copies) ++ mnesia:table_info(Tab, disc_copies).

refresh_servers_on(Nodes) ->
    _ = [try gen_server:call({hm_ec_server, N}, refresh, 5000) catch exit:_ -> gone end
         || N <- Nodes, N =:= node() orelse lists:member(N, nodes())],
    ok.

%% @doc Delete a table (an EC table with its metadata).
-spec delete_table(atom()) -> {atomic, ok} | {aborted, term()}.
delete_table(Tab) ->
    case ec_options(Tab) of
        {ok, Opts} ->
            Nodes = copy_nodes(Tab),
            case writable(Tab, fun() -> mnesia:delete_table(Tab) end) of
                {atomic, ok} ->
                    _ = [mnesia:delete_table(H) || H <- helpers(Opts)],
                    refresh_servers_on(Nodes),             % they forget it now
                    {atomic, ok};
                Aborted -> Aborted
            end;
        error -> mnesia:delete_table(Tab)
    end.

%% @doc Add a copy of a table on `Node'. For an EC table the new copy catches up from the
%% others.
-spec add_table_copy(atom(), node(), ram_copies | disc_copies) -> {atomic, ok} | {aborted, term()}.
add_table_copy(Tab, Node, Type) ->
    case ec_options(Tab) of
        {ok, #{frag := _}} -> {aborted, {partitioned_table, Tab, use_change_table_frag}};
        _ -> add_copy(Tab, Node, Type)
    end.

%% @doc {@link add_table_copy/3} on a fragment of a partitioned table too (its moves).
-spec add_copy(atom(), node(), ram_copies | disc_copies) -> {atomic, ok} | {aborted, term()}.
add_copy(Tab, Node, Type) ->
    case ec_options(Tab) of
        {ok, _} when Type =/= ram_copies, Type =/= disc_copies ->
            {aborted, {bad_ec_option, Tab, Type}};
        {ok, Opts} -> add_copies(helpers(Opts) ++ [Tab], Tab, Node, Type, []);
        error -> mnesia:add_table_copy(Tab, Node, Type)
    end.

add_copies([], Tab, _Node, _Type, _Done) ->
    ok = hm_ec_mnesia:close_everywhere(Tab),
    refresh_servers(Tab),
    {atomic, ok};
add_copies([T | Rest], Tab, Node, Type, Done) ->
    case mnesia:add_table_copy(T, Node, Type) of
        {atomic, ok} -> add_copies(Rest, Tab, Node, Type, [T | Done]);
        Aborted -> _ = [mnesia:del_table_copy(D, Node) || D <- Done], Aborted
    end.

%% @doc Remove the copy on `Node'. For an EC table, `Node' stops being a member, so a node
%% that is gone for good no longer holds back stability.
-spec del_table_copy(atom(), node()) -> {atomic, ok} | {aborted, term()}.
del_table_copy(Tab, Node) ->
    case ec_options(Tab) of
        {ok, #{frag := _}} -> {aborted, {partitioned_table, Tab, use_change_table_frag}};
        _ -> del_copy(Tab, Node)
    end.

%% @doc {@link del_table_copy/2} on a fragment of a partitioned table too (its moves).
-spec del_copy(atom(), node()) -> {atomic, ok} | {aborted, term()}.
del_copy(Tab, Node) ->
    case ec_options(Tab) of
        {ok, Opts} ->
            case writable(Tab, fun() -> mnesia:del_table_copy(Tab, Node) end) of
                {atomic, ok} -> _ = [mnesia:del_table_copy(H, Node) || H <- helpers(Opts)],
                                %% `Node' too, no longer a copy holder: its process stops now
                                %% (at its next refresh, a copy added back meanwhile kept
                                %% the process of the removed one, and its state)
                                refresh_servers_on(lists:usort([Node | copy_nodes(Tab)])),
                                {atomic, ok};
                Aborted -> Aborted
            end;
        error -> mnesia:del_table_copy(Tab, Node)
    end.

%% Mnesia write-locks a table to delete it or a copy of it, and an EC table is read_only for
%% Mnesia (create_table/2): it is read_write for the time of the change (a transaction writing
%% it right then would not be refused), and read_only again unless it is gone.
writable(Tab, Change) ->
    case mnesia:change_table_access_mode(Tab, read_write) of
        {atomic, ok} ->
            Result = Change(),
            _ = mnesia:change_table_access_mode(Tab, read_only),  % aborts if it is gone
            Result;
        Aborted -> Aborted
    end.

%% @doc `mnesia:restore/2' for a backup that holds EC tables (Mnesia's own aborts with
%% `{no_exists, Tab}' on them). Same arguments and results. Each EC table is restored by EC
%% operations issued on this node: `clear_tables' (the default) clears it and writes the
%% backup's records, `keep_tables' writes them over what is there, `recreate_tables' is
%% refused with `{aborted, {recreate_ec_table, Tab}}'; helper tables are never restored, and
%% every other table is restored by Mnesia, first. See {@link hm_ec_restore}.
-spec restore(term(), [tuple()]) -> {atomic, [atom()]} | {aborted, term()}.
restore(Opaque, Args) -> hm_ec_restore:restore(Opaque, Args, fun ec_options/1).

%% @doc Whether `Tab' is an EC table.
-spec is_ec_table(atom()) -> boolean().
is_ec_table(Tab) -> ec_options(Tab) =/= error.

%% @doc The EC options of a table (`#{type, conflict, meta, log}'), or `error'.
-spec ec_options(atom()) -> {ok, #{atom() => term()}} | error.
ec_options(Tab) ->
    %% (mnesia:read_table_property/2 would read one property, but costs 10 us on a table
    %% without it: the lookup exits. Every access of an async_ec activity asks.)
    try mnesia:table_info(Tab, user_properties) of
        Props when is_list(Props) ->
            case lists:keyfind(?PROP, 1, Props) of
                %% only what create_table/2 wrote counts: a user's own property of that name
                %% does not make a table an EC table
                {?PROP, Opts = #{type := T, conflict := P, meta := M, log := L}}
                  when (T =:= pawset orelse T =:= prwset), is_atom(P), is_atom(M), is_atom(L) ->
                    {ok, Opts};
                _ -> error
            end;
        _ -> error
    catch _:_ -> error                           % no such table, or Mnesia not running
    end.
