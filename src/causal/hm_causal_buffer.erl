%% @doc Causal delivery, pure: the receive side of tagged causal broadcast (the Hypermnesia paper, §4.4 and
%% Algorithm 1, "on receive" and "on broadcast").
%%
%% A message is `{Origin, Ts, Payload}' where `Ts' is the origin's delivered vector right after
%% it counted this message (so `Ts[Origin]' is the message's sequence number and its dot is
%% `{Origin, Ts[Origin]}'). {@link rcv_msg/2} buffers a message until it is causally ready,
%% drops one already delivered, and returns every message that became deliverable, in an order
%% that respects happened-before. The timestamp stays attached ("tagged"), so a CRDT can use
%% it.
%%
%% Ready (Algorithm 1): `Ts[Origin] = Delivered[Origin] + 1' and
%% `Ts[J] =< Delivered[J]' for every other `J'.
%%
%% An interval message `{Origin, First, Ts, Payload}' stands for the origin's messages
%% `First..Ts[Origin]' at once, `Ts' the timestamp of the last of them and `Payload' their
%% payloads joined (a delta-interval, *Delta State Replicated Data Types*, Definition 4).
%% Its payload must be idempotent (a join): it is ready as soon as it brings the next
%% message of its origin, `First =< Delivered[Origin] + 1 =< Ts[Origin]', even when a prefix
%% of it was delivered already (the delta-interval's causal merging condition of the same
%% paper), with `Ts[J] =< Delivered[J]' for the other `J'; delivering it counts all of
%% `First..Ts[Origin]' as delivered. A plain message is the interval `Ts[Origin]..Ts[Origin]'.
%%
%% Invariants: `delivered' only grows; a message is returned by `rcv_msg/2' at most once; the
%% buffer holds only messages that are neither delivered nor ready; a buffered message is
%% filed under the next sequence number of its origin it would bring.
-module(hm_causal_buffer).

-export([new/0, new/1, send_msg/2, rcv_msg/2, rcv_ready/2, delivered/1, pending/1, pending_count/1,
         is_ready/2, is_duplicate/2, is_message/1, advance/2, drop_origins/2]).
-export_type([buffer/0, message/0]).

%% small steps of every delivery, inlined (they run several times per operation)
-compile({inline, [seq/2, last_seq/1, first_seq/1, file_seq/2, ts/1, is_duplicate/2]}).

-type origin() :: hm_vv:replica().
-type message() :: {origin(), hm_vv:vv(), term()}
                 | {origin(), pos_integer(), hm_vv:vv(), term()}.    % an interval
-record(cb, {delivered = #{} :: hm_vv:vv(),
             %% Origin => #{Seq => Message}, Seq the first sequence number of the origin the
             %% message brings that is not delivered
             pending = #{} :: #{origin() => #{pos_integer() => message()}},
             count = 0 :: non_neg_integer()}).
-opaque buffer() :: #cb{}.

%% @doc Nothing delivered, nothing pending.
-spec new() -> buffer().
new() -> #cb{}.

%% @doc Start from a delivered vector (e.g. restored from disc).
-spec new(hm_vv:vv()) -> buffer().
new(Delivered) -> #cb{delivered = Delivered}.

%% @doc Algorithm 1 "on broadcast" (Listing 8 `send_msg'): count a local message of `Self' and
%% return its timestamp. The local replica delivers its own message at once.
-spec send_msg(origin(), buffer()) -> {hm_vv:vv(), buffer()}.
send_msg(Self, CB = #cb{delivered = D}) ->
    Ts = hm_vv:increment(Self, D),
    {Ts, CB#cb{delivered = Ts}}.

%% @doc Algorithm 1 "on receive" (Listing 8 `rcv_msg'): buffer, then return everything that
%% became deliverable, each still tagged with its timestamp. Of two different messages of an
%% origin with the same number, the first is kept, unless it waits and the second is ready:
%% a malformed message that names a cause that never comes does not hold back its good twin.
-spec rcv_msg(message(), buffer()) -> {[message()], buffer()}.
rcv_msg(Msg, CB = #cb{delivered = D, pending = P, count = N}) ->
    Origin = element(1, Msg),
    case is_duplicate(Msg, D) of
        true -> {[], CB};
        false when N =:= 0 ->
            %% nothing buffered: deliverable at once, or the only one waiting
            case is_ready(Msg, D) of
                true -> {[Msg], CB#cb{delivered = D#{Origin => last_seq(Msg)}}};
                false -> {[], CB#cb{pending = #{Origin => #{file_seq(Msg, D) => Msg}},
                                    count = 1}}
            end;
        false ->
            Q = maps:get(Origin, P, #{}),
            Seq = file_seq(Msg, D),
            %% a message that is not ready leaves the delivered vector as it is, so nothing
            %% buffered became ready: filed without a look at the rest of the buffer (under
            %% load most arrivals wait for a cause still on its way from another member)
            Ready = is_ready(Msg, D),
            case Q of
                #{Seq := Old} ->
                    %% already buffered (or, for an interval, one bringing as much: the one
                    %% reaching further is kept). A different message of the same numbers
                    %% that is ready, while the buffered one waits (it names a cause that
                    %% never comes: malformed), replaces it: a bad message must not hold
                    %% back its good twin (a replica's messages are unique otherwise)
                    Replaced = CB#cb{pending = P#{Origin => Q#{Seq := Msg}}},
                    case last_seq(Msg) - last_seq(Old) of
                        More when More >= 0, Ready -> deliver_ready(Replaced, []);
                        More when More > 0 -> {[], Replaced};
                        _ -> {[], CB}
                    end;
                _ ->
                    CB1 = CB#cb{pending = P#{Origin => Q#{Seq => Msg}}, count = N + 1},
                    case Ready of
                        true -> deliver_ready(CB1, []);
                        false -> {[], CB1}
                    end
            end
    end.

%% @doc {@link rcv_msg/2} of a message that is causally ready here and names only replicas
%% this buffer has delivered from (on a busy table, nearly every message), or `not_ready'
%% when it is not both (rcv_msg/2 then decides). What it delivers is what rcv_msg/2 would:
%% the message, then whatever buffered it made ready. Nothing buffered was ready before it
%% came, so it goes first; a buffered twin of it (same origin and number) leaves the choice
%% to rcv_msg/2. A message it delivers is one {@link is_message/1} accepts (every counter
%% a positive integer): it checks that on the way, so a caller that validates messages may
%% leave that check to it for the messages it delivers.
-spec rcv_ready(message(), buffer()) -> {[message()], buffer()} | not_ready.
rcv_ready(Msg = {Origin, Ts, _}, CB = #cb{delivered = D, pending = P, count = N}) ->
    case D of
        #{Origin := Seen} ->
            Next = Seen + 1,
            case Ts of
                #{Origin := Next} ->
                    case deps_known(maps:to_list(Ts), Origin, D) of
                        false -> not_ready;
                        true when N =:= 0 -> {[Msg], CB#cb{delivered = D#{Origin := Next}}};
                        true ->
                            case P of
                                #{Origin := #{Next := _}} -> not_ready;
                                _ -> deliver_ready(CB#cb{delivered = D#{Origin := Next}}, [Msg])
                            end
                    end;
                _ -> not_ready
            end;
        _ -> not_ready
    end;
rcv_ready(_, _) -> not_ready.

%% Every other replica a timestamp names is delivered here up to its count (and has been
%% delivered from), and every count is a positive integer.
deps_known([], _, _) -> true;
deps_known([{Origin, _} | Rest], Origin, D) -> deps_known(Rest, Origin, D);
deps_known([{R, C} | Rest], Origin, D) when is_integer(C), C > 0 ->
    case D of
        #{R := Seen} -> C =< Seen andalso deps_known(Rest, Origin, D);
        _ -> false
    end;
deps_known(_, _, _) -> false.

%% hm_vv:get/2.
seq(R, V) -> maps:get(R, V, 0).

%% The origin's last sequence number a message brings, and the first it brings that `D'
%% lacks (what it is filed under while buffered).
last_seq({Origin, Ts, _}) -> seq(Origin, Ts);
last_seq({Origin, _First, Ts, _}) -> seq(Origin, Ts).

first_seq({Origin, Ts, _}) -> seq(Origin, Ts);
first_seq({_Origin, First, _Ts, _}) -> First.

file_seq(Msg, D) -> max(first_seq(Msg), seq(element(1, Msg), D) + 1).

%% Repeat until no origin's next message is ready.
deliver_ready(CB = #cb{pending = P}, Acc) ->
    case take_ready(maps:next(maps:iterator(P)), CB) of
        none -> {lists:reverse(Acc), CB};
        {Msg, CB1} -> deliver_ready(CB1, [Msg | Acc])
    end.

take_ready(none, _) -> none;
take_ready({Origin, Q, Rest}, CB = #cb{delivered = D, pending = P, count = N}) ->
    Next = seq(Origin, D) + 1,
    case Q of
        #{Next := Msg} ->
            case is_ready(Msg, D) of
                true ->
                    Q1 = maps:remove(Next, Q),
                    P1 = case map_size(Q1) of
                             0 -> maps:remove(Origin, P);
                             _ -> P#{Origin := Q1}
                         end,
                    CB1 = CB#cb{delivered = D#{Origin => last_seq(Msg)}, pending = P1,
                                count = N - 1},
                    %% an interval may cover buffered messages of its origin
                    {Msg, case Msg of
                              {_, _, _} -> CB1;
                              _ -> refile(CB1)
                          end};
                false -> take_ready(maps:next(Rest), CB)
            end;
        _ -> take_ready(maps:next(Rest), CB)
    end.

%% @doc The causal delivery condition of Algorithm 1 (for an interval: it brings the next
%% message of its origin, and the others its last one depends on are delivered).
-spec is_ready(message(), hm_vv:vv()) -> boolean().
is_ready(Msg, D) ->
    Origin = element(1, Msg),
    Next = seq(Origin, D) + 1,
    first_seq(Msg) =< Next andalso Next =< last_seq(Msg) andalso
        deps_delivered(maps:to_list(ts(Msg)), Origin, D).

%% Every entry of a timestamp but its origin's is delivered (a loop over the list: a
%% `maps:fold/3' of a timestamp of a few entries cost more than the rest of the check).
deps_delivered([], _, _) -> true;
deps_delivered([{Origin, _} | Rest], Origin, D) -> deps_delivered(Rest, Origin, D);
deps_delivered([{R, C} | Rest], Origin, D) ->
    C =< seq(R, D) andalso deps_delivered(Rest, Origin, D).

ts({_, Ts, _}) -> Ts;
ts({_, _, Ts, _}) -> Ts.

%% @doc Already delivered (all of it, for an interval).
-spec is_duplicate(message(), hm_vv:vv()) -> boolean().
is_duplicate(Msg, D) -> last_seq(Msg) =< seq(element(1, Msg), D).

%% @doc Whether a term has the shape of a message (origin, a version vector with a positive
%% entry for the origin, payload; an interval's first sequence number positive and at most
%% that entry). Use before {@link rcv_msg/2} on input from the network.
-spec is_message(term()) -> boolean().
is_message({Origin, Ts, _}) when is_map(Ts) -> is_ts(Origin, Ts);
is_message({Origin, First, Ts, _}) when is_integer(First), First > 0, is_map(Ts) ->
    is_ts(Origin, Ts) andalso First =< seq(Origin, Ts);
is_message(_) -> false.

is_ts(Origin, Ts) ->
    positive(maps:to_list(Ts)) andalso seq(Origin, Ts) > 0.

positive([]) -> true;
positive([{_, C} | Rest]) when is_integer(C), C > 0 -> positive(Rest);
positive(_) -> false.

%% @doc Everything delivered, as a version vector.
-spec delivered(buffer()) -> hm_vv:vv().
delivered(#cb{delivered = D}) -> D.

%% @doc Buffered messages (not yet ready), in no particular order.
-spec pending(buffer()) -> [message()].
pending(#cb{pending = P}) -> [M || Q <- maps:values(P), M <- maps:values(Q)].

%% @doc How many messages wait in the buffer.
-spec pending_count(buffer()) -> non_neg_integer().
pending_count(#cb{count = N}) -> N.

%% @doc Count as delivered everything `V' covers (after a state catch-up that brought those
%% effects by other means); drops buffered messages that are now duplicates and delivers what
%% became ready.
-spec advance(hm_vv:vv(), buffer()) -> {[message()], buffer()}.
advance(V, CB = #cb{delivered = D}) ->
    deliver_ready(refile(CB#cb{delivered = hm_vv:join(D, V)}), []).

%% Drop the buffered messages the delivered vector covers, and file an interval a part of
%% which it covers under the first sequence number it still brings.
refile(CB = #cb{delivered = D, pending = P}) ->
    P1 = maps:fold(fun(O, Q, Acc) ->
                           Seen = seq(O, D),
                           Q1 = maps:fold(fun(S, M, QAcc) when S > Seen -> keep(S, M, QAcc);
                                             (_, M, QAcc) ->
                                                  case last_seq(M) > Seen of
                                                      true -> keep(Seen + 1, M, QAcc);
                                                      false -> QAcc
                                                  end
                                          end, #{}, Q),
                           case map_size(Q1) of
                               0 -> Acc;
                               _ -> Acc#{O => Q1}
                           end
                   end, #{}, P),
    N1 = maps:fold(fun(_, Q, Acc) -> Acc + map_size(Q) end, 0, P1),
    CB#cb{pending = P1, count = N1}.

%% Two messages filed under one sequence number: the one reaching further is kept.
keep(S, M, Q) ->
    case Q of
        #{S := Old} ->
            case last_seq(M) > last_seq(Old) of
                true -> Q#{S := M};
                false -> Q
            end;
        _ -> Q#{S => M}
    end.

%% @doc Forget the buffered messages of the origins `Drop' says yes to (their origin is gone
%% for good and they cannot become ready). Nothing delivered changes; a dropped message that
%% arrives again is buffered again.
-spec drop_origins(fun((origin()) -> boolean()), buffer()) -> buffer().
drop_origins(Drop, CB = #cb{pending = P, count = N}) ->
    {Gone, Kept} = maps:fold(fun(O, Q, {G, K}) ->
                                     case Drop(O) of
                                         true -> {G + map_size(Q), K};
                                         false -> {G, K#{O => Q}}
                                     end
                             end, {0, #{}}, P),
    CB#cb{pending = Kept, count = N - Gone}.
