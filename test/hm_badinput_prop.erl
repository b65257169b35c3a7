%% @doc Bad-input properties (PropEr, run by EUnit): malformed API calls and malformed or
%% foreign inter-node messages must never crash a Hypermnesia process, never change a table
%% when they are rejected, and every API error must have a shape the docs list.
%%
%% One node, ram schema in a temporary Mnesia dir; two EC tables (`hm_bi_aw', pawset;
%% `hm_bi_rw', prwset) and one plain table (`hm_bi_plain'), each with a few rows.
%%
%% Properties (PROPER_NUMTESTS cases each, default 300):
%%   prop_api_tables    create_table/2, add_table_copy/3, del_table_copy/2, delete_table/1,
%%                      info/1 with random and near-miss arguments
%%   prop_api_writes    random writes/deletes inside async_ec/sync_ec
%%   prop_crdt_api      hm_crdt new/mutate/deliver/from_binary with random and near-miss input
%%   prop_crdt_bad_event_never_blocks  a bad event never blocks or corrupts good events
%%   prop_foreign_msgs  messages that must be dropped, sent straight to hm_ec_server, to an EC
%%                      table's process and to hm_membership
%%   prop_self_msgs     well-formed-looking messages claiming FromNode = node() (the only
%%                      member, so accepted): no crash; a rejected payload changes nothing
%%
%% Invariants after every case: hm_ec_server, hm_membership and the EC tables' processes keep
%% their pids; for a rejected
%% call or a dropped message the three tables' contents and the EC tables' `info/1' (delivered
%% vector, buffered ops, status, members, size) are unchanged; a valid write still works.
%%
%% Errors the docs list, and which the tests accept (docs/guide/02-migration.md and 05-operations.md, docs/crdt.md):
%%   async_ec/sync_ec exit {aborted, R}, R one of
%%     {bad_type, Tab, Record} | {bad_type, Record} | {bad_type, Tab} |
%%     {bad_type, Tab, Record, LockKind} | {ec_write_failed, Tab, {not_ec_table, Tab}}
%%     | {ec_write_failed, Tab, {sync_timeout, Nodes}} | {no_exists, ...}
%%     | {node_not_running, Node}
%%   create_table/2, add_table_copy/3, del_table_copy/2, delete_table/1:
%%     {atomic, ok} | {aborted, Reason} ("any other from mnesia:..."): never an exception
%%   info/1: a map | {error, {not_ec_table, Tab}}
%%   hm_crdt: {unknown_type, T} | {unknown_flavor, F} | {bad_op, Type, Op} | {bad_replica, R}
%%     | {bad_crdt, X} | {bad_event, E} | bad_binary | bad_checksum | {bad_version, V}
%%
%% Outcomes the docs do not list that the properties accept (each counted in the summary
%% as a FINDING under the label below, with its first input; HM_BADINPUT_STRICT=true makes
%% the properties fail on them instead):
%%   mnesia_bad_type_4_tuple, {mnesia_function_clause, F}: Mnesia's own shapes the guide
%%       does not list: an exit function_clause from mnesia:s_write/1 on a tuple of size
%%       < 2 ({bad_type, Tab, Rec, Lock} is listed)
%%   crdt_garbage_event_buffered_for_good: hm_crdt accepts a delta event with a garbage
%%       `{_, _}' payload and a future timestamp, and it stays pending for good
%%   add_table_copy_to_unknown_node_succeeds: add_table_copy/3 to a node that is not a db
%%       node returns {atomic, ok} (Mnesia's own behaviour here, without distribution); the
%%       node becomes a member and holds back stability until del_table_copy/2
%%   info_of_deleted_ec_table_is_stale: info/1 of an EC table just deleted with
%%       delete_table/1 returns its stale map, not {error, {not_ec_table, Tab}}, until the
%%       server's next refresh (up to 1 s)
%%
%% Behaviours each pinned by a test below with its input (the properties report the label
%% in parentheses if one breaks):
%%   create_table/2 refuses an improper Opts list, or a `{}' option with an EC type, with
%%       {aborted, {badarg, Tab, Opts}}, and creates nothing; raising instead would break the
%%       API's promise never to raise (create_table_improper_opts_raises,
%%       create_table_empty_tuple_opt_raises)
%%   a member op whose record key differs from the message key (it passes valid_op_msg/1)
%%       is dropped; written under its own key, the record would show again at the next
%%       tick's stabilization after an EC delete of it
%%       (op_record_key_differs_from_message_key_written / _buffered)
%%   a member op whose record does not fit the table is dropped: neither buffered for good,
%%       nor delivered into the delivered vector, nor applied (a write of {Tab, K} could
%%       make a hidden version of K show again) (op_with_foreign_record_buffered,
%%       op_with_foreign_record_delivered_changes_rows)
%%   hm_crdt refuses a garbage delta before buffering it, so it never makes deliver/2 refuse
%%       the good event that precedes it nor drops the good twin with the same number
%%       (crdt_buffered_garbage_blocks_good_event)
%%   hm_crdt: a forged {hm_crdt, Type, Flavor, Inner} gives mutate/3 {error, {bad_crdt, X}}
%%       rather than raising (crdt_forged_record_not_bad_crdt)
%%   a foreign `tick' message sent to hm_ec_server starts no perpetual timer of its own
%%   hm_crdt and the causal buffer: an event with its origin's right number and payload but
%%       a timestamp naming an event of another origin that never comes waits; its good
%%       twin, arriving after it, replaces it rather than being dropped as its duplicate
%%   create_table(T, [{user_properties, [{hm_ec, 0}]}]) makes a plain table, not an EC
%%       table; taken for one, hm_ec_server would crash in refresh_tables, in init too, and
%%       the hypermnesia application would stop within a second
%%
%% PropEr 1.2 on OTP 25 loses the counterexample of a property that raises: every property
%% body runs under safe/1, which turns an exception into a failure.
-module(hm_badinput_prop).
-include("hm_prop.hrl").
-include_lib("eunit/include/eunit.hrl").

-export([prop_api_tables/0, prop_api_writes/0, prop_crdt_api/0,
         prop_crdt_bad_event_never_blocks/0, prop_foreign_msgs/0, prop_self_msgs/0]).
-export([log/2, setup/0, cleanup/1, snapshot/0]).

-define(AW, hm_bi_aw).
-define(RW, hm_bi_rw).
-define(PLAIN, hm_bi_plain).
-define(TABS, [?AW, ?RW, ?PLAIN]).
-define(EC_TABS, [?AW, ?RW]).
-define(STATS, hm_badinput_stats).
-define(LOGS, hm_badinput_logs).
-define(GHOST, 'ghost@nowhere').

check(Prop) -> hm_crdt_prop:check(Prop).

%%% ================================================================ fixture

setup() ->
    _ = application:stop(hypermnesia),
    _ = mnesia:stop(),
    Dir = filename:join(os:getenv("TMPDIR", "/tmp"),
                        "hm_badinput_" ++ integer_to_list(erlang:unique_integer([positive]))),
    ok = filelib:ensure_dir(filename:join(Dir, "x")),
    OldDir = application:get_env(mnesia, dir),
    ok = application:set_env(mnesia, dir, Dir),
    ok = mnesia:start(),                          % no schema on disc: a ram schema
    ok = hypermnesia:start(),
    %% the server logs what it drops at warning level (hundreds of lines): keep errors only,
    %% and count them in our own handler
    _ = ets:new(?STATS, [named_table, public, set]),
    _ = ets:new(?LOGS, [named_table, public, bag]),
    #{level := OldLevel} = logger:get_primary_config(),
    ok = logger:set_primary_config(level, error),
    DefaultLevel = case logger:get_handler_config(default) of
                       {ok, #{level := L}} -> ok = logger:set_handler_config(default, level, none), L;
                       _ -> undefined
                   end,
    ok = logger:add_handler(hm_badinput, ?MODULE, #{level => error}),
    {atomic, ok} = hypermnesia:create_table(?AW, [{type, pawset}, {attributes, [id, val]},
                                                  {ram_copies, [node()]}]),
    {atomic, ok} = hypermnesia:create_table(?RW, [{type, prwset}, {attributes, [id, val]},
                                                  {ram_copies, [node()]}]),
    {atomic, ok} = mnesia:create_table(?PLAIN, [{attributes, [id, val]},
                                                {ram_copies, [node()]}]),
    ok = hypermnesia:async_ec(fun() ->
                                      [mnesia:write({T, K, {v, K}}) || T <- ?TABS,
                                                                       K <- [1, 2, 3]],
                                      ok
                              end),
    #{dir => Dir, old_dir => OldDir, level => OldLevel, default_level => DefaultLevel}.

cleanup(#{dir := Dir, old_dir := OldDir, level := OldLevel, default_level := DL}) ->
    _ = [hypermnesia:delete_table(T) || T <- ?TABS],
    _ = application:stop(hypermnesia),
    _ = mnesia:stop(),
    _ = logger:remove_handler(hm_badinput),
    ok = logger:set_primary_config(level, OldLevel),
    _ = [logger:set_handler_config(default, level, DL) || DL =/= undefined],
    case OldDir of
        {ok, D} -> application:set_env(mnesia, dir, D);
        undefined -> application:unset_env(mnesia, dir)
    end,
    _ = file:del_dir_r(Dir),
    _ = [ets:delete(T) || T <- [?STATS, ?LOGS], ets:info(T, id) =/= undefined],
    ok.

%% logger handler: remember every error the node logs (the server logs a guarded crash as
%% `hypermnesia: Tab: Class:Reason at Stack')
log(#{msg := Msg, level := Level}, _Config) ->
    Text = case Msg of
               {report, R} -> io_lib:format("~0p", [R]);
               {string, S} -> S;
               {Fmt, Args} -> io_lib:format(Fmt, Args)
           end,
    Line = lists:sublist(lists:flatten(io_lib:format("~ts", [Text])), 300),
    try ets:insert(?LOGS, {Level, Line}) catch error:badarg -> gone end,   % after cleanup
    ok.

count(Key) ->
    try ets:update_counter(?STATS, Key, 1, {Key, 0}) catch error:badarg -> gone end.

%%% ================================================================ state and invariants

pids() -> {whereis(hm_ec_server), whereis(hm_membership),
           [whereis(hm_ec_table_server:name(T)) || T <- ?EC_TABS]}.

%% What must not change when an input is rejected. (stable, unstable_ops/keys and
%% metadata_words move with the ticks, so they are left out.)
snapshot() ->
    #{pids => pids(),
      rows => [{T, lists:sort(mnesia:dirty_select(T, [{'_', [], ['$_']}]))} || T <- ?TABS],
      info => [{T, ec_info(T)} || T <- ?EC_TABS]}.

ec_info(T) ->
    case hypermnesia:info(T) of
        I when is_map(I) ->
            maps:with([table, type, conflict, status, members, delivered, buffered_ops, size], I);
        Other -> Other
    end.

%% A valid write and delete still work, through the server.
probe() ->
    N = erlang:unique_integer([positive]),
    ok = hypermnesia:async_ec(fun() -> mnesia:write({?AW, {probe, N}, N}) end),
    [{?AW, {probe, N}, N}] = hypermnesia:async_ec(fun() -> mnesia:read(?AW, {probe, N}) end),
    ok = hypermnesia:async_ec(fun() -> mnesia:delete({?AW, {probe, N}}) end),
    [] = mnesia:dirty_read(?AW, {probe, N}),
    ok.

%% Tables created by a case are removed after it.
drop_new_tables(Before) ->
    [begin
         count({created_table_removed}),
         _ = try hypermnesia:delete_table(T) catch _:_ -> not_ec end,
         mnesia:delete_table(T)
     end || T <- mnesia:system_info(tables) -- Before],
    ok.

%%% ================================================================ generators

small_any() -> resize(6, any()).

pmap(K, V) -> ?LET(L, list({K, V}), maps:from_list(L)).

node_gen() -> oneof([node(), ?GHOST, 'nonode@nohost', small_any()]).

fresh_tab() -> elements([hm_bi_nosuch, hm_bi_new1, hm_bi_new2]).

%% `Tab' arguments: existing tables, helper tables, fresh names, garbage
tab_gen() ->
    oneof([elements(?TABS), elements([hm_meta_hm_bi_aw, hm_log_hm_bi_rw, schema]),
           fresh_tab(), small_any()]).

opt_gen() ->
    oneof([{type, elements([pawset, prwset, set, bag, ordered_set, awset, undefined])},
           {ec, oneof([elements([pawset, prwset, set, ordered_set]), small_any()])},
           {conflict, oneof([elements([term_order, lww, siblings, bogus]), small_any()])},
           {attributes, oneof([[id, val], [id], [], list(atom()), small_any()])},
           {ram_copies, oneof([[node()], [], [?GHOST], small_any()])},
           {disc_copies, oneof([[node()], [?GHOST], small_any()])},
           {disc_only_copies, [node()]},
           {local_content, bool()},
           {majority, bool()},
           {record_name, oneof([atom(), small_any()])},
           {index, oneof([[val], [nosuch], small_any()])},
           %% not [{hm_ec, _}] on a plain table: were it taken for an EC table, the
           %% application would stop (tested on its own below, user_property_test_)
           {user_properties, oneof([[{other_prop, small_any()}], small_any()])},
           {},
           {type},
           small_any()]).

opts_gen() ->
    oneof([list(opt_gen()),
           ?LET({L, T}, {list(opt_gen()), oneof([small_any(), elements([x, {type, pawset}])])},
                improper(L, T)),
           small_any()]).

%% [A, B | Tail]
improper([], T) -> T;
improper(L, T) -> lists:foldr(fun(X, Acc) -> [X | Acc] end, T, L).

%% Destructive calls never name one of the fixture's tables together with this node (that
%% would legitimately remove them): those get a foreign node.
api_call() ->
    oneof([{create_table, tab_gen(), opts_gen()},
           {add_table_copy, tab_gen(), node_gen(),
            oneof([elements([ram_copies, disc_copies, disc_only_copies, bogus]), small_any()])},
           ?LET({T, N}, {tab_gen(), node_gen()},
                {del_table_copy, T, case is_fixture_tab(T) andalso N =:= node() of
                                        true -> ?GHOST;
                                        false -> N
                                    end}),
           ?LET(T, oneof([fresh_tab(), small_any(), elements([hm_bi_nosuch, 'hm_meta_nosuch'])]),
                {delete_table, T}),
           {info, tab_gen()}]).

is_fixture_tab(T) ->
    lists:member(T, ?TABS ++ [hm_meta_hm_bi_aw, hm_log_hm_bi_aw, hm_meta_hm_bi_rw,
                              hm_log_hm_bi_rw, schema]).

%% A record for one of our tables or a near miss of one.
rec_gen() ->
    oneof([?LET({T, K}, {elements(?TABS), key_gen()}, {T, K, {v, K}}),   % valid
           ?LET(T, elements(?TABS), {T}),
           ?LET({T, K}, {elements(?TABS), key_gen()}, {T, K}),
           ?LET({T, K}, {elements(?TABS), key_gen()}, {T, K, v, extra}),
           ?LET(K, key_gen(), {other_rec, K, v}),
           ?LET(K, key_gen(), {hm_bi_nosuch, K, v}),
           ?LET(K, key_gen(), {hm_meta, K, v}),
           {},
           small_any()]).

key_gen() -> oneof([range(1, 5), small_any()]).

%% One Mnesia call inside the activity; `clear_table' is only tried on tables that are not
%% the fixture's EC tables (on those it is valid and would empty them).
write_action() ->
    oneof([{write1, rec_gen()},
           {write3, tab_gen(), rec_gen(), oneof([write, sticky_write, read, small_any()])},
           {s_write, rec_gen()},
           {delete1, oneof([{elements(?TABS), key_gen()}, {hm_bi_nosuch, 1}, small_any()])},
           {delete3, tab_gen(), key_gen(), oneof([write, small_any()])},
           {delete_object1, rec_gen()},
           {delete_object3, tab_gen(), rec_gen(), oneof([write, small_any()])},
           {clear_table, oneof([fresh_tab(), small_any()])}]).

do_action({write1, R}) -> mnesia:write(R);
do_action({write3, T, R, L}) -> mnesia:write(T, R, L);
do_action({s_write, R}) -> mnesia:s_write(R);
do_action({delete1, Oid}) -> mnesia:delete(Oid);
do_action({delete3, T, K, L}) -> mnesia:delete(T, K, L);
do_action({delete_object1, R}) -> mnesia:delete_object(R);
do_action({delete_object3, T, R, L}) -> mnesia:delete_object(T, R, L);
do_action({clear_table, T}) -> mnesia:clear_table(T).

%%% ================================================================ a. API calls

run_api({create_table, T, O}) -> hypermnesia:create_table(T, O);
run_api({add_table_copy, T, N, Ty}) -> hypermnesia:add_table_copy(T, N, Ty);
run_api({del_table_copy, T, N}) -> hypermnesia:del_table_copy(T, N);
run_api({delete_table, T}) -> hypermnesia:delete_table(T);
run_api({info, T}) -> hypermnesia:info(T).

outcome(F) ->
    try F() of
        V -> {returned, V}
    catch Class:Reason -> {raised, Class, Reason}
    end.

%% Documented result shapes of the table functions.
api_documented(info, T, {returned, M}) when is_map(M) -> lists:member(T, ?EC_TABS);
api_documented(info, T, {returned, {error, {not_ec_table, T}}}) -> true;
api_documented(info, _, _) -> false;
api_documented(_, _, {returned, {atomic, ok}}) -> true;
api_documented(_, _, {returned, {aborted, _}}) -> true;
api_documented(_, _, _) -> false.

prop_api_tables() ->
    ?SAFE_FORALL(Call, api_call(),
        begin
            Tables0 = mnesia:system_info(tables),
            S0 = snapshot(),
            Out = outcome(fun() -> run_api(Call) end),
            Undone = undo_copy(Call, Out),
            S1 = snapshot(),
            drop_new_tables(Tables0),
            Name = element(1, Call),
            count({api, Name, shape(Out)}),
            Documented = api_documented(Name, element(2, Call), Out)
                orelse known(api_finding(Call, Out), Call, Out),
            _ = Undone =:= true andalso known(add_table_copy_to_unknown_node_succeeds, Call, Out),
            ok = probe(),
            ?WHENFAIL(io:format(user, "call ~0p~n  -> ~0p~n  before ~0p~n  after ~0p~n",
                                [Call, Out, S0, S1]),
                      conjunction([{documented_result, Documented},
                                   {unchanged, S0 =:= S1}]))
        end).

%% add_table_copy/3 of a fixture table to a node that is not a db node succeeds: remove
%% the copy again, so the node does not stay a member for the following cases.
undo_copy({add_table_copy, T, N, _}, {returned, {atomic, ok}}) ->
    case lists:member(T, ?EC_TABS) andalso N =/= node() of
        true -> {atomic, ok} = hypermnesia:del_table_copy(T, N), true;
        false -> _ = is_fixture_tab(T) andalso N =/= node() andalso mnesia:del_table_copy(T, N),
                 false
    end;
undo_copy(_, _) -> false.

shape({returned, {aborted, R}}) when is_tuple(R) -> {aborted, element(1, R)};
shape({returned, {aborted, R}}) when is_atom(R) -> {aborted, R};
shape({returned, {aborted, _}}) -> {aborted, other};
shape({returned, {error, R}}) when is_tuple(R) -> {error, element(1, R)};
shape({returned, {atomic, ok}}) -> atomic_ok;
shape({returned, M}) when is_map(M) -> map;
shape({returned, V}) when is_atom(V) -> V;
shape({returned, _}) -> returned_other;
shape({raised, C, {R, _}}) when is_atom(R) -> {raised, C, R};
shape({raised, C, R}) when is_atom(R) -> {raised, C, R};
shape({raised, C, _}) -> {raised, C}.

%% Documented exits of async_ec / sync_ec (docs/guide/02-migration.md, "Errors you may see").
write_documented({returned, _}) -> true;
write_documented({raised, exit, {aborted, R}}) -> documented_abort(R);
write_documented(_) -> false.

documented_abort({bad_type, _Tab, _Rec}) -> true;
documented_abort({bad_type, _Tab, _Rec, _Lock}) -> true;
documented_abort({bad_type, _Rec}) -> true;
documented_abort({node_not_running, N}) -> N =:= node();
documented_abort({ec_write_failed, T, {not_ec_table, T}}) -> true;
documented_abort({ec_write_failed, _, {sync_timeout, _}}) -> true;
documented_abort(R) when is_tuple(R), element(1, R) =:= no_exists -> true;
documented_abort(_) -> false.

prop_api_writes() ->
    ?SAFE_FORALL({Ctx, Action}, {elements([async_ec, sync_ec]), write_action()},
        begin
            S0 = snapshot(),
            Out = outcome(fun() -> hypermnesia:Ctx(fun() -> do_action(Action) end) end),
            S1 = snapshot(),
            count({write, element(1, Action), shape(Out)}),
            Rejected = element(1, Out) =:= raised,
            Documented = write_documented(Out)
                orelse known(write_finding(Out), {Ctx, Action}, Out),
            ok = probe(),
            ?WHENFAIL(io:format(user, "~p(~0p)~n  -> ~0p~n  before ~0p~n  after ~0p~n",
                                [Ctx, Action, Out, S0, S1]),
                      conjunction([{no_crash, pids() =:= maps:get(pids, S0)},
                                   {documented_error, Documented},
                                   {rejected_changes_nothing,
                                    not Rejected orelse S0 =:= S1}]))
        end).

%%% ================================================================ a. CRDT calls

crdt_type() -> oneof([elements(hm_crdt:types()), small_any()]).
crdt_flavor() -> oneof([elements(hm_crdt:flavors()), small_any()]).

op_gen() ->
    oneof([{elements([add, remove, inc, dec, assign, set, enable, disable, update]),
            small_any()},
           {add, small_any()}, {remove, small_any()}, increment, decrement,
           {increment, oneof([int(), small_any()])}, {decrement, oneof([int(), small_any()])},
           {add_all, oneof([list(small_any()), exactly([a | b])])},
           {update, small_any(), crdt_type(), small_any()},
           {update, k, awset, {add_all, exactly([a | b])}},
           {assign, small_any(), oneof([int(), small_any()])},
           {assign, small_any()}, {update, small_any(), small_any()}, enable, disable, reset,
           small_any()]).

replica_gen() -> oneof([elements([a, b, 1, node()]), small_any(),
                        exactly(self()), exactly(make_ref()), exactly(fun() -> ok end)]).

%% Events: another replica's real events, then mutated near misses of them.
event_gen() ->
    oneof([small_any(),
           {hm_event, crdt_flavor(), crdt_type(), small_any()},
           ?LET({F, T, O, Ts, P}, {crdt_flavor(), elements(hm_crdt:types()), small_any(),
                                   vv_gen(), small_any()},
                {hm_event, F, T, {O, Ts, P}}),
           ?LET({T, Ts, P}, {elements(hm_crdt:types()), vv_gen(), small_any()},
                {hm_event, state, T, {{P, P}, Ts}})]).

vv_gen() -> oneof([pmap(elements([a, b, c]), oneof([int(), small_any()])), small_any()]).

crdt_call() ->
    oneof([{new, crdt_type(), crdt_flavor()},
           {mutate, elements(hm_crdt:types()), elements(hm_crdt:flavors()), op_gen(),
            replica_gen()},
           {mutate_forged, op_gen(), replica_gen(), forged_crdt()},
           {deliver, elements(hm_crdt:types()), elements(hm_crdt:flavors()), event_gen()},
           {deliver_forged, event_gen(), forged_crdt()},
           {from_binary, binary()},
           {from_binary_flip, elements(hm_crdt:types()), elements(hm_crdt:flavors()),
            non_neg_integer(), range(1, 255)},
           {from_binary_cut, elements(hm_crdt:types()), elements(hm_crdt:flavors()),
            non_neg_integer()}]).

%% Not a CRDT, or a record of the right name with fields that are not a CRDT's.
forged_crdt() ->
    oneof([small_any(),
           {hm_crdt, crdt_type(), crdt_flavor(), small_any()},
           {hm_crdt}]).

%% A CRDT with a little state: two mutations of replica a.
some_crdt(T, F) ->
    C0 = hm_crdt:new(T, F),
    lists:foldl(fun(Op, C) ->
                        case hm_crdt:mutate(Op, a, C) of
                            {ok, C1, _} -> C1;
                            {error, _} -> C
                        end
                end, C0, sample_ops(T)).

sample_ops(gcounter) -> [increment, {increment, 2}];
sample_ops(pncounter) -> [increment, {decrement, 1}];
sample_ops(awset) -> [{add, x}, {add, y}];
sample_ops(rwset) -> [{add, x}, {remove, y}];
sample_ops(lwwreg) -> [{assign, x}];
sample_ops(mvreg) -> [{assign, x}];
sample_ops(ewflag) -> [enable];
sample_ops(map) -> [{update, f, awset, {add, x}}];
sample_ops(_) -> [].

crdt_documented_error({unknown_type, _}) -> true;
crdt_documented_error({unknown_flavor, _}) -> true;
crdt_documented_error({bad_op, _, _}) -> true;
crdt_documented_error({bad_replica, _}) -> true;
crdt_documented_error({bad_crdt, _}) -> true;
crdt_documented_error({bad_event, _}) -> true;
crdt_documented_error({type_mismatch, _, _}) -> true;
crdt_documented_error({not_supported, merge, op}) -> true;
crdt_documented_error(bad_binary) -> true;
crdt_documented_error(bad_checksum) -> true;
crdt_documented_error({bad_version, _}) -> true;
crdt_documented_error(_) -> false.

%% {Result ok?, Outcome}. A returned CRDT must still be usable (value/1, to_binary/1).
run_crdt({new, T, F}) ->
    Out = outcome(fun() -> hm_crdt:new(T, F) end),
    {crdt_or_error(Out), Out};
run_crdt({mutate, T, F, Op, R}) ->
    C = some_crdt(T, F),
    Out = outcome(fun() -> hm_crdt:mutate(Op, R, C) end),
    Ok = case Out of
             {returned, {ok, C1, _Ev}} -> usable(C1);
             {returned, {error, E}} -> crdt_documented_error(E);
             _ -> false
         end,
    {Ok, Out};
run_crdt({mutate_forged, Op, R, X}) ->
    Out = outcome(fun() -> hm_crdt:mutate(Op, R, X) end),
    {case Out of
         {returned, {error, E}} -> crdt_documented_error(E);
         {returned, {ok, C1, _}} -> hm_crdt:is_crdt(X) andalso usable(C1);
         _ -> forged_finding(X, {mutate, Op, R, X}, Out)
     end, Out};
run_crdt({deliver, T, F, Ev}) ->
    C = some_crdt(T, F),
    Out = outcome(fun() -> hm_crdt:deliver(Ev, C) end),
    {crdt_or_error(Out), Out};
run_crdt({deliver_forged, Ev, X}) ->
    Out = outcome(fun() -> hm_crdt:deliver(Ev, X) end),
    {case Out of
         {returned, {error, E}} -> crdt_documented_error(E);
         {returned, C1} -> hm_crdt:is_crdt(X) andalso usable(C1)
                               orelse forged_finding(X, {deliver, Ev, X}, Out);
         _ -> forged_finding(X, {deliver, Ev, X}, Out)
     end, Out};
run_crdt({from_binary, B}) ->
    Out = outcome(fun() -> hm_crdt:from_binary(B) end),
    {from_binary_ok(Out), Out};
run_crdt({from_binary_flip, T, F, Pos, Mask}) ->
    Bin = hm_crdt:to_binary(some_crdt(T, F)),
    P = Pos rem byte_size(Bin),
    <<Pre:P/binary, Byte, Post/binary>> = Bin,
    Out = outcome(fun() -> hm_crdt:from_binary(<<Pre/binary, (Byte bxor Mask), Post/binary>>) end),
    %% a flipped byte never decodes (magic, version and CRC-32 cover every byte)
    {from_binary_ok(Out) andalso element(1, element(2, Out)) =:= error, Out};
run_crdt({from_binary_cut, T, F, Len}) ->
    Bin = hm_crdt:to_binary(some_crdt(T, F)),
    Cut = binary:part(Bin, 0, Len rem byte_size(Bin)),
    Out = outcome(fun() -> hm_crdt:from_binary(Cut) end),
    {from_binary_ok(Out) andalso element(1, element(2, Out)) =:= error, Out}.

%% A tuple {hm_crdt, Type, Flavor, Inner} that is not a CRDT (known type, wrong flavor or
%% inner state) must give {error, {bad_crdt, X}}; if mutate/3 or deliver/2 raise, or return
%% an unusable "CRDT", the outcome is reported under this label.
forged_finding(X, Input, Out) when tuple_size(X) =:= 4, element(1, X) =:= hm_crdt ->
    known(crdt_forged_record_not_bad_crdt, Input, Out);
forged_finding(_, _, _) -> false.

crdt_or_error({returned, {error, E}}) -> crdt_documented_error(E);
crdt_or_error({returned, C}) -> hm_crdt:is_crdt(C) andalso usable(C);
crdt_or_error(_) -> false.

from_binary_ok({returned, {ok, C}}) -> usable(C);
from_binary_ok({returned, {error, E}}) -> crdt_documented_error(E);
from_binary_ok(_) -> false.

%% A CRDT returned by the API can still be read, encoded and mutated.
usable(C) ->
    try
        _ = hm_crdt:value(C),
        {ok, C} =:= hm_crdt:from_binary(hm_crdt:to_binary(C))
    catch _:_ -> false
    end.

prop_crdt_api() ->
    ?SAFE_FORALL(Call, crdt_call(),
        begin
            {Ok, Out} = run_crdt(Call),
            count({crdt, element(1, Call), shape(Out)}),
            ?WHENFAIL(io:format(user, "~0p~n  -> ~0p~n", [Call, Out]), Ok)
        end).

%% Replica b makes some operations; replica a receives b's events in order with one
%% malformed event (a mutated copy of one of them) slipped in somewhere. The malformed one is
%% rejected or harmless: a ends with the same value as a replica that got only the good ones.
prop_crdt_bad_event_never_blocks() ->
    ?SAFE_FORALL({T, F, N, Pos, How}, {elements(hm_crdt:types()), elements([delta, op]),
                                       range(1, 4), non_neg_integer(), bad_event_how()},
        begin
            {_, Evs} = lists:foldl(fun(_, {C, Acc}) ->
                                           Op = hd(sample_ops(T)),
                                           {ok, C1, E} = hm_crdt:mutate(Op, b, C),
                                           {C1, Acc ++ [E]}
                                   end, {hm_crdt:new(T, F), []}, lists:seq(1, N)),
            Bad = spoil(How, lists:nth(Pos rem N + 1, Evs)),
            {Pre, Post} = case How of
                              {early_same_seq, _} -> {[], Evs};   % before its good twin
                              _ -> lists:split(Pos rem (N + 1), Evs)
                          end,
            Deliver = fun(E, C) ->
                              case hm_crdt:deliver(E, C) of
                                  {error, _} = Err -> throw({rejected, E, Err});
                                  C1 -> C1
                              end
                      end,
            Good = lists:foldl(Deliver, some_crdt(T, F), Evs),
            Mixed = try lists:foldl(fun(E, C) when E =:= Bad ->
                                            case hm_crdt:deliver(E, C) of
                                                {error, {bad_event, _}} -> C;
                                                {error, Other} -> throw({undocumented, Other});
                                                C1 -> C1
                                            end;
                                       (E, C) -> Deliver(E, C)
                                    end, some_crdt(T, F), Pre ++ [Bad] ++ Post)
                    catch throw:Why -> {thrown, Why}
                    end,
            count({crdt_bad_event, element(1, How)}),
            Ok = case Mixed of
                     {thrown, {rejected, _, _}} ->
                         %% a good event refused after the bad one: the bad one blocked it
                         known(crdt_buffered_garbage_blocks_good_event, {T, F, Bad, Evs},
                               Mixed);
                     {thrown, _} -> false;
                     _ ->
                         hm_crdt:value(Good) =:= hm_crdt:value(Mixed)
                             andalso (hm_crdt:pending(Mixed) =:= 0
                                      orelse known(crdt_garbage_event_buffered_for_good,
                                                   {T, F, Bad}, hm_crdt:pending(Mixed)))
                 end,
            ?WHENFAIL(io:format(user, "~p/~p bad ~0p~n  events ~0p~n  good ~0p~n  mixed ~0p~n",
                                [T, F, Bad, Evs, hm_crdt:value(Good), Mixed]),
                      Ok)
        end).

bad_event_how() ->
    oneof([{payload, small_any()}, {origin, small_any()}, {ts, vv_gen()},
           {future, range(2, 5)}, {flavor, elements([state, delta, op, x])},
           {early_same_seq, small_any()},
           {type, crdt_type()}]).

spoil({payload, P}, {hm_event, F, T, {O, Ts, _}}) -> {hm_event, F, T, {O, Ts, P}};
spoil({origin, O}, {hm_event, F, T, {_, Ts, P}}) -> {hm_event, F, T, {O, Ts, P}};
%% a timestamp that moves the origin's own entry forward and keeps the good payload is no
%% garbage: it is a well-formed later event of the origin, and is applied once its
%% predecessors arrive (it made a counter count one more, once in a full run); the origin's
%% own entry stays at most where it was
spoil({ts, V}, {hm_event, F, T, {O, Ts, P}}) ->
    V1 = case V of
             #{O := Seq} when is_integer(Seq) -> V#{O := min(Seq, maps:get(O, Ts))};
             _ -> V
         end,
    {hm_event, F, T, {O, V1, P}};
spoil({future, K}, {hm_event, F, T, {O, Ts, P}}) ->
    %% a payload of a future sequence number that is garbage: buffered, then applied later
    {hm_event, F, T, {O, Ts#{O => maps:get(O, Ts) + 10 * K}, {garbage, P}}};
spoil({early_same_seq, P}, {hm_event, F, T, {O, Ts, _}}) ->
    %% the sequence number of a good event, a garbage payload of the shape valid_payload/3
    %% checks ({_, _} for delta)
    {hm_event, F, T, {O, Ts, {garbage, P}}};
spoil({flavor, X}, {hm_event, _, T, M}) -> {hm_event, X, T, M};
spoil({type, X}, {hm_event, F, _, M}) -> {hm_event, F, X, M}.

%%% ================================================================ b. messages

self_replica(Tab) ->
    #{delivered := D} = hypermnesia:info(Tab),
    case [R || R = {N, _} <- maps:keys(D), N =:= node()] of
        [R | _] -> R;
        [] -> {node(), 1}
    end.

%% Messages that no member would send: every one must be dropped without effect.
foreign_msg() ->
    oneof([small_any(),
           {hm_ec, oneof([fresh_tab(), small_any(), exactly(?PLAIN)]), node_gen(), small_any()},
           {hm_ec, elements(?EC_TABS), oneof([exactly(?GHOST), small_any()]), member_msg()},
           {hm_ec, elements(?EC_TABS), node(), garbage_member_msg()},
           {hm_ec, elements(?EC_TABS), node()},
           {hm_ec, elements(?EC_TABS), node(), small_any(), extra},
           {'$gen_cast', small_any()},
           {nodedown, oneof([exactly(?GHOST), small_any()])},
           {hm_sync_timeout, elements(?EC_TABS), small_any()}]).

%% Members' message shapes filled with random or wrong-shaped content.
member_msg() ->
    oneof([garbage_member_msg(), {op, op_msg(fake)}, {ack, replica_gen_msg(), vv_msg()},
           {ack, replica_gen_msg(), vv_msg(), newest_msg()}]).

garbage_member_msg() ->
    oneof([{op, small_any()},
           {op, bad_op_msg()},
           {ack, small_any(), small_any()},
           {ack, small_any()},
           {snapshot, oneof([small_any(), exactly(#{rows => not_a_list})])},
           {snapshot_empty},
           {snapshot_none},
           {applied, small_any()},
           {applied},
           small_any()]).

replica_gen_msg() -> oneof([{node(), pos_integer()}, {?GHOST, int()}, small_any()]).

vv_msg() -> oneof([pmap(replica_gen_msg(), int()), small_any()]).

newest_msg() -> oneof([pmap(oneof([exactly(node()), exactly(?GHOST), small_any()]), int()),
                       small_any()]).

%% Op messages with a malformed header: valid_op_msg/1 must refuse them.
bad_op_msg() ->
    oneof([?LET({O, Ts, P}, {replica_gen_msg(), vv_msg(), small_any()}, {O, Ts, P}),
           ?LET({N, Inc, C}, {oneof([exactly(node()), exactly(?GHOST)]), pos_integer(),
                              oneof([0, neg_integer()])},
                {{N, Inc}, #{{N, Inc} => C}, {async, 1, delete}}),
           ?LET({N, Inc}, {oneof([exactly(node()), exactly(?GHOST)]), pos_integer()},
                {{N, Inc}, #{{N, Inc} => 1, {x, 1} => -1}, {async, 1, delete}}),
           ?LET(P, op_payload(bad), {{?GHOST, 1}, #{{?GHOST, 1} => 1}, P})]).

%% A header that passes valid_op_msg/1 (origin {Node, Inc}, positive counters).
op_msg(Kind) ->
    ?LET({O, Extra, Seq, P},
         {oneof([{exactly(?GHOST), pos_integer()}, {exactly(node()), pos_integer()},
                 {exactly(node()), exactly(self_inc)}]),
          frequency([{3, []}, {1, list({{elements([p@h, q@h]), pos_integer()}, pos_integer()})}]),
          frequency([{1, exactly(1)}, {1, pos_integer()}, {3, exactly(next)}]),
          op_payload(Kind)},
         {'$sym', O, Extra, Seq, P}).

%% Payloads: `good' are valid operations of the table; `bad' are not operations at all;
%% `fake' passes valid_op/1 but does not fit the table (wrong record, key mismatch).
op_payload(good) ->
    ?LET({M, K}, {elements([async, sync]), range(1, 5)},
         oneof([{M, K, {write, {tab, K, fake}, {1, ?GHOST}}}, {M, K, delete},
                {M, K, {delete_object, {tab, K, {v, K}}}}]));
op_payload(bad) ->
    oneof([?LET({M, K, Op}, {oneof([elements([async, sync]), small_any()]), key_gen(),
                             small_any()}, {M, K, Op}),
           ?LET(K, key_gen(), {async, K, {write, {tab, K, v}, {not_int, ?GHOST}}}),
           ?LET(K, key_gen(), {async, K, {write, not_a_tuple, {1, ?GHOST}}}),
           ?LET(K, key_gen(), {bogus_mode, K, delete}),
           small_any()]);
op_payload(fake) ->
    ?LET({M, K, K2}, {elements([async, sync]), range(1, 5), range(6, 9)},
         oneof([{M, K, {write, {other_rec, K, v}, {1, ?GHOST}}},
                {M, K, {write, {tab, K}, {1, ?GHOST}}},
                {M, K, {write, {}, {1, ?GHOST}}},
                {M, K, {write, {tab, K2, v}, {1, ?GHOST}}},      % record key =/= message key
                {M, K, {delete_object, {other_rec, K, v}}},
                {M, K, {delete_object, {}}}])).

%% Fill in the symbolic parts of a message against the current state.
concrete({hm_ec, Tab, From, {op, {'$sym', O, Extra, Seq, P}}}) ->
    Origin = case O of
                 {N, self_inc} -> {N, element(2, self_replica(Tab))};
                 _ -> O
             end,
    Ts0 = maps:from_list(Extra),
    Ts = case Seq of
             next -> Ts0#{Origin => maps:get(Origin, delivered(Tab), 0) + 1};
             _ -> Ts0#{Origin => Seq}
         end,
    {hm_ec, Tab, From, {op, {Origin, Ts, fix_rec(Tab, P)}}};
concrete(M) -> M.

%% Members' messages go in an envelope with the format version and the table's instance (its
%% Mnesia cookie): made for an existing EC table as a member would; anything else goes as
%% generated.
envelope({hm_ec, Tab, From, Msg}) when is_atom(Tab) ->
    case lists:member(Tab, ?EC_TABS) of
        true -> hm_ec_wire:envelope(Tab, From, Msg, mnesia:table_info(Tab, cookie));
        false -> {hm_ec, Tab, From, Msg}
    end;
envelope(M) -> M.

fix_rec(Tab, {M, K, {write, R, H}}) -> {M, K, {write, fix_tab(Tab, R), H}};
fix_rec(Tab, {M, K, {delete_object, R}}) -> {M, K, {delete_object, fix_tab(Tab, R)}};
fix_rec(_, P) -> P.

fix_tab(Tab, R) when is_tuple(R), tuple_size(R) > 0, element(1, R) =:= tab -> setelement(1, R, Tab);
fix_tab(_, R) -> R.

delivered(Tab) -> maps:get(delivered, hypermnesia:info(Tab)).

%% The node's servers, and each EC table's own process.
target() -> elements([hm_ec_server, hm_membership | [hm_ec_table_server:name(T) || T <- ?EC_TABS]]).

%% Synchronise with the servers and every table's process: every message sent before has
%% been handled.
sync() ->
    _ = [hypermnesia:info(T) || T <- ?EC_TABS],
    _ = hm_membership:status(),
    ok.

prop_foreign_msgs() ->
    ?SAFE_FORALL(Batch, non_empty(list({target(), foreign_msg()})),
        begin
            S0 = snapshot(),
            Sent = [{To, concrete(M)} || {To, M} <- Batch],
            [erlang:send(To, envelope(M)) || {To, M} <- Sent],
            sync(),
            S1 = snapshot(),
            [count({foreign, To, msg_shape(M)}) || {To, M} <- Sent],
            ok = probe(),
            ?WHENFAIL(io:format(user, "sent ~0p~n  before ~0p~n  after ~0p~n", [Sent, S0, S1]),
                      conjunction([{same_pids, maps:get(pids, S0) =:= pids()},
                                   {unchanged, S0 =:= S1}]))
        end).

%% Messages claiming to come from this node, the only member, so the server accepts them as a
%% member's: ops with well-formed headers and fake origins, timestamps and payloads, acks
%% with fake vectors, snapshots, applied. Must hold: no crash, the server still works; an op
%% whose payload is not a valid operation of the table (bad or fake) changes nothing.
self_msg() ->
    oneof([{good, {hm_ec, elements(?EC_TABS), node(), {op, op_msg(good)}}},
           {fake, {hm_ec, elements(?EC_TABS), node(), {op, op_msg(fake)}}},
           {bad, {hm_ec, elements(?EC_TABS), node(), {op, bad_op_msg()}}},
           {bad, {hm_ec, elements(?EC_TABS), node(), garbage_member_msg()}},
           {ack, {hm_ec, elements(?EC_TABS), node(), {ack, replica_gen_msg(), vv_msg()}}},
           {ack, {hm_ec, elements(?EC_TABS), node(),
                  {ack, replica_gen_msg(), vv_msg(), newest_msg()}}},
           {bad, {hm_ec, elements(?EC_TABS), node(), {snapshot_req}}}]).

prop_self_msgs() ->
    ?SAFE_FORALL({Kind, Msg0}, self_msg(),
        begin
            S0 = snapshot(),
            Logs0 = ets:info(?LOGS, size),
            Msg = concrete(Msg0),
            hm_ec_server ! envelope(Msg),
            sync(),
            S1 = snapshot(),
            Logged = ets:info(?LOGS, size) - Logs0,
            Changed = maps:get(rows, S0) =/= maps:get(rows, S1),
            InfoChanged = maps:get(info, S0) =/= maps:get(info, S1),
            count({self, Kind, msg_shape(Msg), {rows_changed, Changed},
                   {info_changed, InfoChanged}, {errors_logged, Logged > 0}}),
            [ets:insert(?STATS, {{example, Kind, Changed, InfoChanged, Logged > 0}, Msg})
             || Changed orelse InfoChanged orelse Logged > 0],
            ok = probe(),
            Must = case Kind of
                       good -> true;                     % accepted by design: a member's op
                       ack -> not Changed;
                       _ -> not Changed andalso not InfoChanged
                   end orelse known(self_finding(Msg, S0, S1), Msg, diff(S0, S1)),
            ?WHENFAIL(io:format(user, "~p message ~0p~n  before ~0p~n  after ~0p~n",
                                [Kind, Msg, S0, S1]),
                      conjunction([{same_pids, maps:get(pids, S0) =:= pids()},
                                   {no_change_from_rejected, Must}]))
        end).

msg_shape({hm_ec, T, F, {Tag, _}}) when is_atom(Tag) ->
    {hm_ec, tab_kind(T), from_kind(F), Tag};
msg_shape({hm_ec, T, F, {Tag}}) when is_atom(Tag) -> {hm_ec, tab_kind(T), from_kind(F), Tag};
msg_shape({hm_ec, T, F, {Tag, _, _}}) when is_atom(Tag) ->
    {hm_ec, tab_kind(T), from_kind(F), Tag};
msg_shape({hm_ec, T, F, _}) -> {hm_ec, tab_kind(T), from_kind(F), other};
msg_shape(T) when is_tuple(T), tuple_size(T) > 0, is_atom(element(1, T)) -> element(1, T);
msg_shape(_) -> other.

tab_kind(T) -> case lists:member(T, ?EC_TABS) of true -> ec; false -> not_ec end.
from_kind(F) when F =:= node() -> self;
from_kind(F) when is_atom(F) -> other_node;
from_kind(_) -> not_atom.

%%% ================================================================ accepted outcomes

%% Each outcome the properties accept though the docs do not list it is named, counted and
%% printed in the summary with its first input, and accepted so the suite stays usable; with
%% HM_BADINPUT_STRICT=true it fails the property instead. See the module doc.
known(none, _, _) -> false;
known(Finding, Input, Out) ->
    count({'FINDING', Finding}),
    _ = ets:insert_new(?STATS, {{'FINDING_example', Finding}, {Input, Out}}),
    os:getenv("HM_BADINPUT_STRICT") =/= "true".

%% create_table/2 with an improper list, or an EC type and a `{}' option, must return
%% {aborted, {badarg, Tab, Opts}} / {aborted, {bad_ec_option, Tab, {}}}, not raise.
api_finding({create_table, _, Opts}, {raised, error, _}) when is_list(Opts) ->
    case is_proper(Opts) of
        false -> create_table_improper_opts_raises;
        true -> case lists:member({}, Opts) of
                    true -> create_table_empty_tuple_opt_raises;
                    false -> none
                end
    end;
%% info/1 of an EC table deleted with delete_table/1 still returns its map until the
%% server's next refresh (up to 4 ticks): delete_table/1 does not refresh the servers.
api_finding({info, T}, {returned, M}) when is_map(M) ->
    case lists:member(T, mnesia:system_info(tables)) of
        false -> info_of_deleted_ec_table_is_stale;
        true -> none
    end;
api_finding(_, _) -> none.

is_proper([_ | T]) -> is_proper(T);
is_proper([]) -> true;
is_proper(_) -> false.

%% Mnesia's own errors that the guide's table does not list.
write_finding({raised, exit, {aborted, {bad_type, _, _, _}}}) -> mnesia_bad_type_4_tuple;
write_finding({raised, exit, {function_clause, [{mnesia, F, _, _} | _]}}) ->
    {mnesia_function_clause, F};
write_finding(_) -> none.

%% An op whose record's key is not the message's key passes valid_op_msg/1 and must be
%% dropped: written, the record would go under its own key and the metadata under the
%% message's key.
%% An op whose record does not fit the table (wrong name/arity) must be dropped: accepted,
%% it would be buffered (buffered_ops + 1, for good) when its causal predecessors are
%% missing; when deliverable, a delete_object of it would be delivered (the delivered vector
%% counts it) and a write of it would crash the effect (logged as an error, state kept).
%% An op from an unknown origin replica with a well-formed payload is buffered forever when
%% its predecessors never come (buffered_ops grows; the documented limits only cover crashed
%% incarnations).
self_finding({hm_ec, _, _, {op, {_, _, {_, K, {write, R, _}}}}}, S0, S1)
  when is_tuple(R), tuple_size(R) >= 2, element(2, R) =/= K ->
    case maps:get(rows, S0) =/= maps:get(rows, S1) of
        true -> op_record_key_differs_from_message_key_written;
        false -> buffered_finding(S0, S1, op_record_key_differs_from_message_key_buffered)
    end;
self_finding({hm_ec, _, _, {op, {_, _, {_, _, Op}}}}, S0, S1) when is_tuple(Op) ->
    case maps:get(rows, S0) =/= maps:get(rows, S1) of
        %% e.g. a deliverable write of {Tab, K} (arity 2) making a hidden earlier version
        %% of K, {Tab, K, fake}, show again
        true -> op_with_foreign_record_delivered_changes_rows;
        false -> buffered_finding(S0, S1, op_with_foreign_record_buffered)
    end;
self_finding(_, _, _) -> none.

%% What differs between two snapshots.
diff(#{rows := R0, info := I0}, #{rows := R1, info := I1}) ->
    [{T, {removed, A -- B}, {added, B -- A}} || {{T, A}, {T, B}} <- lists:zip(R0, R1), A =/= B]
        ++ [{T, K, maps:get(K, A), maps:get(K, B)}
            || {{T, A}, {T, B}} <- lists:zip(I0, I1), is_map(A), is_map(B),
               K <- maps:keys(A), maps:get(K, A) =/= maps:get(K, B, undefined)].

buffered_finding(S0 = #{rows := R}, S1 = #{rows := R}, Name) ->
    Strip = fun(S) -> [{T, maps:without([buffered_ops, delivered], I)}
                       || {T, I} <- maps:get(info, S)] end,
    case Strip(S0) =:= Strip(S1) of
        true -> Name;
        false -> none
    end;
buffered_finding(_, _, _) -> none.

%%% ================================================================ EUnit entry point

-define(P(Name, Prop), {timeout, 600, {Name, ?_assert(check(Prop))}}).

badinput_test_() ->
    {setup, fun setup/0, fun(S) -> summary(), cleanup(S) end,
     [{"create_table/2 refuses an improper list or a {} option",
       ?_test(create_table_refuses_malformed_options())},
      {"a member op whose record key differs from its key is dropped",
       ?_test(op_with_record_key_not_its_key_is_dropped())},
      {"a member op with a foreign record is dropped",
       ?_test(op_with_foreign_record_is_dropped())},
      {"a garbage delta is refused and never blocks a good event",
       ?_test(garbage_delta_is_refused())},
      {"a forged #hm_crdt{} gives mutate/3 {bad_crdt, X}",
       ?_test(forged_crdt_gives_bad_crdt())},
      {"an event naming a cause that never comes does not hold back its twin",
       ?_test(ready_twin_replaces_waiting_event())},
?P("a. table API: random Tab/Opts, documented results, nothing changed",
         prop_api_tables()),
      ?P("a. async_ec/sync_ec writes: documented aborts, rejected writes change nothing",
         prop_api_writes()),
      ?P("a. hm_crdt: random new/mutate/deliver/from_binary give documented errors",
         prop_crdt_api()),
      ?P("a. hm_crdt: a malformed event never blocks or corrupts good events",
         prop_crdt_bad_event_never_blocks()),
      ?P("b. foreign/malformed messages to hm_ec_server and hm_membership are dropped",
         prop_foreign_msgs()),
      ?P("b. messages claiming to come from this node: no crash, rejected payloads inert",
         prop_self_msgs()),
      {"a foreign `tick' message does not start another tick chain",
       ?_test(foreign_tick_starts_no_timer())}]}.

%% Were a plain table with user property hm_ec taken for an EC table, the application would
%% stop: this test runs on its own node state, after the rest.
user_property_test_() ->
    {setup, fun setup/0, fun cleanup/1,
     [{timeout, 30, {"a plain table with user property hm_ec is not an EC table",
                     ?_test(user_property_hm_ec_makes_no_ec_table())}}]}.

%% A malformed option list is refused whole, as Mnesia refuses one, by every kind of EC table
%% (plain, partitioned, CRDT): the partitioned and CRDT ways in checked it option by option,
%% naming a fragment (`{bad_ec_option, Tab_frag2, foo}') or crashing on `{}'.
malformed_options_test_() ->
    {setup, fun setup/0, fun cleanup/1,
     [{timeout, 60, {"create_table/2 answers {badarg, Tab, Opts} for every kind of EC table",
                     ?_test(malformed_options())}}]}.

malformed_options() ->
    Frag = {frag_properties, [{n_fragments, 2}]},
    Lists = [[{type, pawset}, foo], [{type, pawset} | improper], [{type, pawset}, {}],
             [{type, prwset}, Frag, foo], [{type, pawset}, Frag, {}], [{type, pawset}, Frag | x],
             [{crdt, gcounter}, foo], [{crdt, gcounter}, {}], [{crdt, gcounter}, Frag, foo],
             [{crdt, gcounter} | x], [foo]],
    Tables0 = lists:sort(mnesia:system_info(tables)),
    [?assertEqual({Opts, {aborted, {badarg, hm_bi_malformed, Opts}}},
                  {Opts, hypermnesia:create_table(hm_bi_malformed, Opts)}) || Opts <- Lists],
    ?assertEqual(Tables0, lists:sort(mnesia:system_info(tables))).

%%% ================================================================ behaviours, minimal inputs
%%
%% Each pins a behaviour with a minimal input of the kind the properties above generate (they
%% cover the input too; set HM_BADINPUT_STRICT=true to make them fail on every outcome they
%% only accept).

create_table_refuses_malformed_options() ->
    %% a malformed option list is refused with the documented abort, nothing created
    ?assertEqual({aborted, {badarg, hm_bi_bad_opts, [{type, pawset} | 0]}},
                 hypermnesia:create_table(hm_bi_bad_opts, [{type, pawset} | 0])),
    ?assertMatch({aborted, {badarg, hm_bi_bad_opts, _}},
                 hypermnesia:create_table(hm_bi_bad_opts, [{attributes, [a, b]} | x])),
    ?assertMatch({aborted, {badarg, hm_bi_bad_opts, _}},
                 hypermnesia:create_table(hm_bi_bad_opts, [{type, pawset}, {}])),
    ?assertNot(lists:member(hm_bi_bad_opts, mnesia:system_info(tables))).

ghost_op(Payload) ->
    Origin = {?GHOST, erlang:unique_integer([positive])},
    {hm_ec, ?AW, node(), {op, {Origin, #{Origin => 1}, Payload}}}.

op_with_record_key_not_its_key_is_dropped() ->
    %% an operation whose record's key is not the key it names is dropped
    #{delivered := D0} = hypermnesia:info(?AW),
    [] = mnesia:dirty_read(?AW, other_key),
    hm_ec_server ! envelope(ghost_op({async, op_key, {write, {?AW, other_key, evil}, {1, ?GHOST}}})),
    sync(),
    ?assertEqual([], mnesia:dirty_read(?AW, other_key)),
    ?assertEqual([], mnesia:dirty_read(?AW, op_key)),
    ?assertMatch(#{delivered := D0}, hypermnesia:info(?AW)).

op_with_foreign_record_is_dropped() ->
    %% an operation whose record does not fit the table is dropped, not delivered
    #{delivered := D0} = hypermnesia:info(?AW),
    Rows0 = snapshot(),
    hm_ec_server ! envelope(ghost_op({async, 1, {delete_object, {other_rec, 1, v}}})),
    sync(),
    #{delivered := D1} = hypermnesia:info(?AW),
    ?assertEqual(maps:get(rows, Rows0), maps:get(rows, snapshot())),
    ?assertEqual(D0, D1).

garbage_delta_is_refused() ->
    %% a malformed delta is refused before buffering, so the good event is delivered
    B0 = hm_crdt:new(gcounter, delta),
    {ok, B1, E1} = hm_crdt:mutate(increment, b, B0),
    {ok, _, {hm_event, delta, gcounter, {b, Ts2, _}}} = hm_crdt:mutate(increment, b, B1),
    Bad = {hm_event, delta, gcounter, {b, Ts2, {garbage, x}}},
    ?assertMatch({error, {bad_event, _}}, hm_crdt:deliver(Bad, hm_crdt:new(gcounter, delta))),
    A1 = hm_crdt:deliver(E1, hm_crdt:new(gcounter, delta)),
    ?assertEqual(1, hm_crdt:value(A1)).

ready_twin_replaces_waiting_event() ->
    %% gcounter, delta: b's first increment with a timestamp that also names a third event
    %% of a, which never comes, arrives before the good one; the good one replaces it rather
    %% than being dropped as its duplicate
    {ok, _, Good = {hm_event, delta, gcounter, {b, Ts, D}}} =
        hm_crdt:mutate(increment, b, hm_crdt:new(gcounter, delta)),
    Bad = {hm_event, delta, gcounter, {b, Ts#{a => 3}, D}},
    C1 = hm_crdt:deliver(Bad, hm_crdt:new(gcounter, delta)),
    ?assertEqual(1, hm_crdt:pending(C1)),
    C2 = hm_crdt:deliver(Good, C1),
    ?assertEqual(1, hm_crdt:value(C2)),
    ?assertEqual(0, hm_crdt:pending(C2)).

forged_crdt_gives_bad_crdt() ->
    %% mutate/3 of a forged #hm_crdt{} gives {bad_crdt, X} (value/1 of a forged term raises:
    %% it takes a CRDT, as documented)
    ?assertMatch({error, {bad_crdt, _}}, hm_crdt:mutate(increment, a, {hm_crdt, pncounter, x, y})).

foreign_tick_starts_no_timer() ->
    %% a stray `tick' message does not start another timer chain
    Ticks = fun() -> maps:get(ticks, sys:get_state(hm_ec_server)) end,
    Rate = fun() -> T0 = Ticks(), timer:sleep(1000), Ticks() - T0 end,
    Before = Rate(),
    [hm_ec_server ! tick || _ <- lists:seq(1, 10)],
    After = Rate(),
    ?assert(After =< Before + 1),
    ?assertEqual(pids(), snapshot_pids()).

snapshot_pids() -> pids().

%% A plain table with a user property named hm_ec is not an EC table: only the options map
%% create_table/2 writes makes one. Taken for an EC table, it would crash the server until
%% the application stopped.
user_property_hm_ec_makes_no_ec_table() ->
    Pids = pids(),
    ?assertMatch({P1, P2, Ts} when is_pid(P1) andalso is_pid(P2) andalso is_list(Ts), Pids),
    ?assertEqual({atomic, ok},
                 hypermnesia:create_table(hm_bi_user_prop, [{user_properties, [{hm_ec, 0}]}])),
    ?assertNot(hypermnesia:is_ec_table(hm_bi_user_prop)),
    ok = hm_ec_server:refresh(),
    ?assertEqual(Pids, pids()),
    {atomic, ok} = mnesia:delete_table(hm_bi_user_prop),
    ok.

summary() ->
    Stats = lists:sort([{K, N} || {K, N} <- ets:tab2list(?STATS), is_integer(N)]),
    io:format(user, "~n=== hm_badinput_prop summary (~p cases per property) ===~n",
              [hm_crdt_prop:numtests()]),
    [io:format(user, "  ~6b  ~0p~n", [N, K]) || {K, N} <- Stats],
    Examples = [E || E = {{example, _, _, _, _}, _} <- ets:tab2list(?STATS)],
    [io:format(user, "  example ~0p:~n    ~0p~n", [K, M]) || {K, M} <- lists:sublist(Examples, 10)],
    [io:format(user, "  FINDING ~p, first input:~n    ~0p~n    -> ~0P~n", [F, I, O, 40])
     || {{'FINDING_example', F}, {I, O}} <- lists:sort(ets:tab2list(?STATS))],
    Errors = lists:usort([L || {_, L} <- ets:tab2list(?LOGS)]),
    io:format(user, "  errors logged by the node: ~p distinct~n", [length(Errors)]),
    [io:format(user, "    ~ts~n", [L]) || L <- lists:sublist(Errors, 15)],
    ok.
