%% @doc Restoring a Mnesia backup that holds EC tables (behind `hypermnesia:restore/2').
%%
%% `mnesia:restore/2' cannot restore an EC table: it write-locks every table it restores, and
%% an EC table is `read_only' for Mnesia (transactions must not write it, see
%% {@link hm_ec_mnesia}), so it aborts with `{no_exists, Tab}' and restores nothing. Nor
%% should it: it would replace each copy's contents behind the CRDT's back.
%%
%% Here the EC tables of the backup are restored as EC operations, issued on this node and
%% broadcast to every copy like any `async_ec' write: `clear_tables' (Mnesia's default) is a
%% `clear_table' followed by a write of every record of the backup, `keep_tables' the writes
%% only (records of the same key are replaced, others stay), `skip_tables' nothing.
%% `recreate_tables' is refused for an EC table (`{aborted, {recreate_ec_table, Tab}}'): the
%% table would come back without its helper tables; delete it with `hypermnesia:delete_table/1',
%% create it with `hypermnesia:create_table/2' and restore it with `clear_tables'. The helper
%% tables (`hm_meta_Tab', `hm_log_Tab') hold one copy's own causal state and are never
%% restored. Every other table of the backup is restored by `mnesia:restore/2' itself, with
%% the same arguments, first: if Mnesia aborts, no EC table is touched.
%%
%% The EC part is not atomic and not isolated, as no EC write is: writes made meanwhile on
%% other nodes are merged by the table's type (with `pawset' a write concurrent with the
%% restore's clear survives it, with `prwset' the clear wins). It needs a copy of every EC
%% table it restores on this node, ready to take writes; otherwise it aborts as an EC write
%% does (`{ec_write_failed, Tab, Reason}'), after restoring what came before.
-module(hm_ec_restore).

-export([restore/3]).

-type ec_options() :: fun((atom()) -> {ok, #{atom() => term()}} | error).
-export_type([ec_options/0]).

%% @doc `mnesia:restore(Opaque, Args)' for a backup that may hold EC tables; `EcOptions' tells
%% the EC tables and their options (`hypermnesia:ec_options/1'). Returns the restored tables.
-spec restore(term(), term(), ec_options()) -> {atomic, [atom()]} | {aborted, term()}.
restore(Opaque, Args, EcOptions) when is_list(Args) ->
    case mnesia:system_info(is_running) of
        yes -> restore_checked(Opaque, Args, EcOptions);
        _ -> {aborted, {node_not_running, node()}}
    end;
restore(_Opaque, Args, _EcOptions) ->
    {aborted, {badarg, Args}}.

restore_checked(Opaque, Args, EcOptions) ->
    try parse(Args, #{module => mnesia:system_info(backup_module), ops => [],
                      default => clear_tables}) of
        R -> restore_parsed(Opaque, Args, R, EcOptions)
    catch throw:Bad -> {aborted, Bad}
    end.

%% mnesia_schema's own checks of the arguments, with its error terms; for each table the first
%% option naming it counts, else `default_op'.
parse([], R) -> R;
parse([{module, Mod} | Rest], R) when is_atom(Mod) -> parse(Rest, R#{module := Mod});
parse([{Op, Tabs} | Rest], R = #{ops := Ops})
  when (Op =:= clear_tables orelse Op =:= recreate_tables orelse Op =:= keep_tables
        orelse Op =:= skip_tables), is_list(Tabs) ->
    case Op =/= keep_tables andalso Op =/= skip_tables andalso lists:member(schema, Tabs) of
        true -> throw({badarg, {Op, schema}});
        false -> parse(Rest, R#{ops := Ops ++ [{T, Op} || T <- Tabs]})
    end;
parse([{default_op, Op} | Rest], R)
  when Op =:= clear_tables; Op =:= recreate_tables; Op =:= keep_tables; Op =:= skip_tables ->
    parse(Rest, R#{default := Op});
parse([{default_op, Op} | _], _) -> throw({badarg, {bad_default_op, Op}});
parse([Bad | _], _) -> throw({badarg, Bad}).

op(Tab, #{ops := Ops, default := Default}) ->
    case lists:keyfind(Tab, 1, Ops) of
        {_, Op} -> Op;
        false -> Default
    end.

restore_parsed(Opaque, Args, R = #{module := Mod}, EcOptions) ->
    %% the EC tables of this node's schema, and the helper tables of any EC table
    Ec = maps:from_list([{T, O} || T <- mnesia:system_info(tables), {ok, O} <- [EcOptions(T)]]),
    Wanted = fun(T) -> maps:is_key(T, Ec) andalso lists:member(op(T, R), [clear_tables, keep_tables])
             end,
    case read_backup(Opaque, Mod, Wanted) of
        {error, Reason} -> {aborted, Reason};
        {ok, {Schema, Recs}} ->
            BupEc = [T || {T, Def} <- Schema, is_ec_def(Def)],
            Helpers = lists:usort(
                        [H || #{meta := M, log := L} <- maps:values(Ec), H <- [M, L]]
                        ++ [H || {_, Def} <- Schema, is_ec_def(Def), H <- helpers_of(Def)]),
            Tabs = [T || {T, _} <- Schema, not lists:member(T, Helpers)],
            EcTabs = [T || T <- Tabs, maps:is_key(T, Ec) orelse lists:member(T, BupEc)],
            case refused(EcTabs, Ec, R) of
                {aborted, _} = Refused -> Refused;
                ok ->
                    Mine = [T || T <- EcTabs, maps:is_key(T, Ec)],
                    Skip = {skip_tables, Mine ++ Helpers},
                    case mnesia:restore(Opaque, [Skip | Args]) of
                        {atomic, Restored} ->
                            restore_ec([T || T <- Mine, Wanted(T)], Recs, R, Restored);
                        {aborted, _} = Aborted -> Aborted
                    end
            end
    end.

%% An EC table (now, or in the backup) cannot be recreated; one the backup has as an EC table
%% and that is gone now cannot be restored into (Mnesia's answer for a missing table).
refused([], _Ec, _R) -> ok;
refused([T | Ts], Ec, R) ->
    case {op(T, R), maps:is_key(T, Ec)} of
        {recreate_tables, _} -> {aborted, {recreate_ec_table, T}};
        {skip_tables, _} -> refused(Ts, Ec, R);
        {_, true} -> refused(Ts, Ec, R);
        {_, false} ->
            case lists:member(T, mnesia:system_info(tables)) of
                true -> refused(Ts, Ec, R);           % a plain table now: Mnesia's
                false -> {aborted, {no_exists, T}}
            end
    end.

is_ec_def(Def) when is_list(Def) ->
    case lists:keyfind(user_properties, 1, Def) of
        {_, Props} when is_list(Props) ->
            case lists:keyfind(hm_ec, 1, Props) of
                {hm_ec, #{type := _, meta := _, log := _}} -> true;
                _ -> false
            end;
        _ -> false
    end;
is_ec_def(_) -> false.

helpers_of(Def) ->
    {_, Props} = lists:keyfind(user_properties, 1, Def),
    {hm_ec, #{meta := M, log := L}} = lists:keyfind(hm_ec, 1, Props),
    [M, L].

%% The backup's table definitions, in its order, and the records of the EC tables wanted.
read_backup(Opaque, Mod, Wanted) ->
    Collect = fun(Item, Acc) -> {[], item(Item, Acc, Wanted)} end,
    try mnesia:traverse_backup(Opaque, Mod, dummy, read_only, Collect, {[], #{}}) of
        {ok, {Schema, Recs}} -> {ok, {lists:reverse(Schema), Recs}};
        {error, _} = E -> E
    catch exit:Reason -> {error, Reason}
    end.

item({schema, schema, _}, Acc, _) -> Acc;
item({schema, T, Def}, {Schema, Recs}, _) -> {[{T, Def} | lists:keydelete(T, 1, Schema)], Recs};
item({schema, T}, {Schema, Recs}, _) -> {lists:keydelete(T, 1, Schema), Recs};
item(Rec, {Schema, Recs}, Wanted) when is_tuple(Rec), tuple_size(Rec) >= 2 ->
    T = element(1, Rec),
    case Wanted(T) of
        true -> {Schema, Recs#{T => [Rec | maps:get(T, Recs, [])]}};
        false -> {Schema, Recs}
    end;
item(_, Acc, _) -> Acc.

%% clear_tables: a clear, then the backup's records; keep_tables: the records. Each an EC
%% operation, issued here and broadcast.
restore_ec(Tabs, Recs, R, Restored) ->
    Ec = fun() ->
                 lists:foreach(fun(T) -> restore_table(T, op(T, R), maps:get(T, Recs, [])) end,
                               Tabs)
         end,
    try mnesia:activity(async_dirty, Ec, [], hm_ec_access) of
        ok -> {atomic, Restored ++ Tabs}
    catch exit:{aborted, Reason} -> {aborted, Reason}
    end.

restore_table(T, Op, Recs) ->
    _ = case Op of
            clear_tables ->
                case mnesia:clear_table(T) of
                    {atomic, ok} -> ok;
                    {aborted, Reason} -> mnesia:abort(Reason)
                end;
            keep_tables -> ok
        end,
    %% a backup stores a record under its table's name
    Name = mnesia:table_info(T, record_name),
    lists:foreach(fun(Rec) -> mnesia:write(T, setelement(1, Rec, Name), write) end,
                  lists:reverse(Recs)).
