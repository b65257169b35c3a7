%% @doc The workload of `make bench' (§5.4 of the paper <em>Hypermnesia: Eventual Consistency in
%% Mnesia</em>): the tables' attributes and the transaction types t1..t5, each a plain Mnesia
%% fun, and {@link run_in/2}, which runs one under an access context.
-module(hm_bench_workload).

%% the transaction types and the context runner, exported so the migration is visible
-export([t1/2, t2/2, t3/2, t4/2, t5/2, run_in/2]).
-export([attrs/1]).

-export_type([context/0]).

-include("hm_bench.hrl").

-type context() :: transaction | sync_dirty | async_dirty | {async_ec, pawset | prwset}
                 | floor.
%% `floor' (the simple workload only): no Mnesia at all, each write one `ets:insert' into a
%% public table on the generator's node and one message per peer, whose receiver does the
%% same insert. What a replicated write cannot cost less than, measured like the others.

%%% ============================================================= the workload (§5.4)
%%
%% subscriber {subscriber, Number, Name, GroupId, Location, ActiveSessions, ChangedBy, ChangedTime}
%% group      {group, GroupId, Name, AllowRead, AllowInsert, AllowDelete}   (bit masks)
%% server     {server, ServerId, NoRead, NoInsert, NoDelete}
%% session    {session, {Number, ServerBit}, Details}

-spec attrs(atom()) -> [atom()].
attrs(subscriber) -> [number, name, group_id, location, active_sessions, changed_by, changed_time];
attrs(group) -> [group_id, name, allow_read, allow_insert, allow_delete];
attrs(server) -> [server_id, no_read, no_insert, no_delete];
attrs(session) -> [key, details].

%% @doc Run a transaction-type fun under a context: the one line that changes.
-spec run_in(context(), fun(() -> R)) -> R.
run_in({async_ec, _}, F) -> hypermnesia:async_ec(F);
run_in(Kind, F) -> mnesia:activity(Kind, F).

%% @doc t1, update_current_location: read the subscriber for update, write a new location.
-spec t1(pos_integer(), map()) -> fun(() -> ok | not_found).
t1(Sub, _) ->
    fun() ->
            case mnesia:wread({subscriber, Sub}) of
                [S] -> mnesia:write(setelement(5, setelement(7, setelement(8, S, stamp()),
                                                             node()),
                                               rand:uniform(1000)));
                [] -> not_found
            end
    end.

%% @doc t2, get_subscriber_data: read one subscriber.
-spec t2(pos_integer(), map()) -> fun(() -> tuple() | not_found).
t2(Sub, _) ->
    fun() ->
            case mnesia:read({subscriber, Sub}) of
                [S] -> S;
                [] -> not_found
            end
    end.

%% @doc t3, get_session_details: subscriber, its group's read permission, then the session.
-spec t3(pos_integer(), map()) -> fun(() -> term()).
t3(Sub, #{bit := Bit}) ->
    fun() ->
            case mnesia:read({subscriber, Sub}) of
                [S] ->
                    [G] = mnesia:read({group, element(4, S)}),
                    case allowed(element(4, G), Bit) of
                        true -> case mnesia:read({session, {Sub, Bit}}) of
                                    [Se] -> element(3, Se);
                                    [] -> not_found
                                end;
                        false -> denied
                    end;
                [] -> not_found
            end
    end.

%% @doc t4, create_session: check the group's insert right, write the session, mark it in the
%% subscriber, count it on the server.
-spec t4(pos_integer(), map()) -> fun(() -> term()).
t4(Sub, #{bit := Bit, server := Srv}) ->
    fun() ->
            case mnesia:wread({subscriber, Sub}) of
                [S] ->
                    [G] = mnesia:read({group, element(4, S)}),
                    case allowed(element(5, G), Bit) of
                        true ->
                            ok = mnesia:write({session, {Sub, Bit}, {node(), stamp()}}),
                            ok = mnesia:write(setelement(6, S, element(6, S) bor (1 bsl Bit))),
                            bump(Srv, 4);
                        false -> denied
                    end;
                [] -> not_found
            end
    end.

%% @doc t5, delete_session: check the group's delete right, delete the session, unmark it,
%% count it on the server.
-spec t5(pos_integer(), map()) -> fun(() -> term()).
t5(Sub, #{bit := Bit, server := Srv}) ->
    fun() ->
            case mnesia:wread({subscriber, Sub}) of
                [S] ->
                    [G] = mnesia:read({group, element(4, S)}),
                    case allowed(element(6, G), Bit) of
                        true ->
                            ok = mnesia:delete({session, {Sub, Bit}}),
                            ok = mnesia:write(setelement(6, S,
                                                         element(6, S) band bnot (1 bsl Bit))),
                            bump(Srv, 5);
                        false -> denied
                    end;
                [] -> not_found
            end
    end.

bump(Srv, Pos) ->
    case mnesia:wread({server, Srv}) of
        [R] -> mnesia:write(setelement(Pos, R, element(Pos, R) + 1));
        [] -> not_found
    end.

allowed(Mask, Bit) -> Mask band (1 bsl Bit) =/= 0.

stamp() -> erlang:system_time(microsecond).
