%% @doc The log of a tagged causal stable broadcast ({@link hm_tcsb}): every operation
%% delivered at this replica, of any origin, kept until it is causally stable (the Hypermnesia
%% paper, *Hypermnesia: Eventual Consistency in Mnesia*, §4.7, causal stability and its
%% cleanup), so that any member can repair any other after a partition (§4.10–4.12). It is a
%% transport log, not the datatype's PO-log (Baquero, Almeida, Shoker, *Making
%% Operation-based CRDTs Operation-based*): the broadcast keeps the operations as messages,
%% the datatype keeps what it needs of them.
%%
%% The log is kept per origin, in sequence order, each operation with the tick at which it
%% was logged (retransmission, {@link hm_tcsb_resend}, resends an operation only once it is
%% old enough). Pure: a value in, a value out.
%% <ul>
%% <li>{@link append/3}: log a delivered operation (on delivery, on broadcast, and when a log
%% is restored from disc or a state transfer).</li>
%% <li>{@link prune/2}: drop the operations a stable vector covers (Algorithm 1's "check
%% stability", then cleanup), returning them.</li>
%% <li>{@link walk/4}: from a cut, the logged operations in causal order, each deliverable
%% once those before it are (what retransmission sends).</li>
%% </ul>
%%
%% Invariants: per origin, every logged sequence number lies in `[Lo, Hi]'; the entries of
%% the list are above every sequence number of the map, highest first; the ticks of an
%% origin's entries do not decrease with the sequence number (an origin's operations are
%% delivered in sequence order, and ticks only grow); an origin with no entry left is not in
%% the log.
-module(hm_tcsb_log).

-export([new/0, append/3, prune/2, sorted/1, walk/4, msgs/1, fold/3, count/1, origins/1,
         highest/2, ranges/1]).
-export_type([log/0, due/0]).

-type message() :: hm_causal_buffer:message().
-type replica() :: {node(), term()}.
-type tick() :: non_neg_integer().
%% One origin's logged operations: the lowest and highest sequence numbers that may be
%% present, Seq => {Message, TickLogged}, and the newest ones as a list, highest first, each
%% above every sequence number of the map. Delivery per origin is in sequence order, so an
%% operation is put at the head of the list: a map insert would copy a path of the map on
%% every operation, and a balanced tree would rebalance on every append, both a large share
%% of the cost of delivering an operation under load. Pruning drops a suffix of the list and
%% a prefix of the map; retransmission, which looks operations up by sequence number, first
%% moves the list into the map (sorted/1).
-type olog() :: {pos_integer(), pos_integer(), #{pos_integer() => entry()},
                 [{pos_integer(), entry()}]}.
-type entry() :: {message(), tick()}.
-opaque log() :: #{replica() => olog()}.
%% Whether an operation of an origin, logged at a tick, is due to be taken by walk/4.
-type due() :: fun((replica(), tick()) -> boolean()).

%% @doc An empty log.
-spec new() -> log().
new() -> #{}.

%% @doc Log message `Msg', delivered here, at tick `T'.
-spec append(message(), tick(), log()) -> log().
append(Msg = {Origin, Ts, _}, T, L) ->
    Seq = maps:get(Origin, Ts),
    Entry = {Msg, T},
    L#{Origin => case L of
                     #{Origin := {Lo, Hi, M, New}} when Seq > Hi ->
                         {Lo, Seq, M, [{Seq, Entry} | New]};
                     #{Origin := OL} ->
                         {Lo, Hi, M, []} = sorted_origin(OL),
                         {min(Lo, Seq), Hi, M#{Seq => Entry}, []};
                     _ -> {Seq, Seq, #{}, [{Seq, Entry}]}
                 end}.

%% An origin's log with every operation in the map.
sorted_origin(OL = {_, _, _, []}) -> OL;
sorted_origin({Lo, Hi, M, New}) -> {Lo, Hi, maps:merge(M, maps:from_list(New)), []}.

%% @doc The log with every origin's operations in its map (the same operations): what
%% looking operations up by sequence number needs, kept so that the next look-up finds it
%% done.
-spec sorted(log()) -> log().
sorted(L) -> maps:map(fun(_, OL) -> sorted_origin(OL) end, L).

%% An origin's logged entries, in no particular order.
entries({_, _, M, New}) -> maps:to_list(M) ++ New.

%% @doc Cleanup at causal stability: drop every logged operation whose dot is in the stable
%% vector `V'. Returns the operations dropped and the log left.
-spec prune(hm_vv:vv(), log()) -> {[message()], log()}.
prune(V, L) ->
    maps:fold(fun(O, OL, {G, K}) ->
                      case drop_upto(hm_vv:get(O, V), OL, G) of
                          {G1, empty} -> {G1, K};
                          {G1, OL1} -> {G1, K#{O => OL1}}
                      end
              end, {[], #{}}, L).

%% Stable operations of an origin are a prefix of its sequence numbers. Often the whole
%% log is (a member that caught up after a partition acknowledges the whole cut at once, and
%% taking hundreds of thousands of operations out of the map one by one would hold the table
%% for a second): it goes as a whole.
drop_upto(Upto, OL = {Lo, _, _, _}, Gone) when Upto < Lo -> {Gone, OL};
drop_upto(Upto, {_, Hi, M, New}, Gone) when Upto >= Hi ->
    {gone(New, lists:reverse([Msg || {Msg, _} <- maps:values(M)], Gone)), empty};
drop_upto(Upto, {Lo, Hi, M, New}, Gone0) ->
    %% the list is highest first: what is stable of it is a suffix
    {NewKept, NewGone} = newer_than(Upto, New, []),
    Gone = gone(NewGone, Gone0),
    End = min(Upto, Hi),
    {Gone1, M1} = case (End - Lo + 1) * 4 < map_size(M) of
                      _ when map_size(M) =:= 0 -> {Gone, M};
                      true ->       % a short prefix: walk it
                          lists:foldl(fun(Seq, {G, Mx}) ->
                                              case maps:take(Seq, Mx) of
                                                  {{Msg, _}, Mx1} -> {[Msg | G], Mx1};
                                                  error -> {G, Mx}
                                              end
                                      end, {Gone, M}, lists:seq(Lo, End));
                      false ->      % most of the log: split it, and build what stays anew
                          {G, Kept} = maps:fold(fun(Seq, {Msg, _}, {G0, K0}) when Seq =< End ->
                                                        {[Msg | G0], K0};
                                                   (Seq, E, {G0, K0}) -> {G0, [{Seq, E} | K0]}
                                                end, {Gone, []}, M),
                          {G, maps:from_list(Kept)}
                  end,
    case map_size(M1) =:= 0 andalso NewKept =:= [] of
        true -> {Gone1, empty};
        false -> {Gone1, {End + 1, Hi, M1, NewKept}}
    end.

%% The messages of a list of an origin's logged entries, put in front of `Gone' (last
%% entry first).
gone(Entries, Gone) -> lists:reverse([Msg || {_, {Msg, _}} <- Entries], Gone).

%% A list of logged entries, highest first, split after the last one above `Upto'
%% (lists:splitwith/2 without a fun call per entry).
newer_than(Upto, [E = {Seq, _} | Rest], Acc) when Seq > Upto -> newer_than(Upto, Rest, [E | Acc]);
newer_than(_, Rest, Acc) -> {lists:reverse(Acc), Rest}.

%% @doc The causal-order walk: from the cut `From', repeatedly take, origin by origin, the
%% next logged operation that is due and ready on top of what was taken; at most `Max'.
%% Returns them, in the order taken, and the cut they reach. An origin stops at an operation
%% not due (its operations are logged at nondecreasing ticks) or missing from the log; an
%% operation not ready waits for the other origins. So every operation taken is deliverable
%% at a replica that has `From' once those taken before it arrived, wherever `Max' cuts.
-spec walk(hm_vv:vv(), due(), non_neg_integer() | infinity, log()) -> {[message()], hm_vv:vv()}.
walk(From, Due, Max, L) ->
    Its = [{O, M} || {O, OL} <- lists:sort(maps:to_list(L)), {_, _, M, _} <- [sorted_origin(OL)]],
    walk(Its, From, Due, Max, []).

walk(Its, V, Due, Max, Acc) ->
    case walk_pass(Its, V, Due, Max, Acc, []) of
        {Its1, V1, Max1, Acc1} when Acc1 =/= Acc, Max1 =/= 0 -> walk(Its1, V1, Due, Max1, Acc1);
        {_, V1, _, Acc1} -> {lists:reverse(Acc1), V1}
    end.

%% One pass over the origins, taking at most one operation of each.
walk_pass([], V, _Due, Max, Acc, Its) -> {lists:reverse(Its), V, Max, Acc};
walk_pass(Rest, V, _Due, 0, Acc, Its) -> {lists:reverse(Its, Rest), V, 0, Acc};
walk_pass([{O, OL} = It | Rest], V, Due, Max, Acc, Its) ->
    Seq = hm_vv:get(O, V) + 1,
    case OL of
        #{Seq := {M, At}} ->
            case Due(O, At) of
                false -> walk_pass(Rest, V, Due, Max, Acc, Its);     % this origin is done
                true ->
                    case hm_causal_buffer:is_ready(M, V) of
                        true -> walk_pass(Rest, V#{O => Seq}, Due, dec(Max), [M | Acc],
                                          [It | Its]);
                        false -> walk_pass(Rest, V, Due, Max, Acc, [It | Its])
                    end
            end;
        _ -> walk_pass(Rest, V, Due, Max, Acc, Its)          % not logged: this origin is done
    end.

dec(infinity) -> infinity;
dec(N) -> N - 1.

%% @doc Every logged operation, oldest first per origin, origins in term order.
-spec msgs(log()) -> [message()].
msgs(L) ->
    [M || {_, OL} <- lists:sort(maps:to_list(L)), {_, {M, _}} <- lists:sort(entries(OL))].

%% @doc Fold `Fun' over the logged messages, in no particular order, as {@link lists:foldl/3}
%% does, until it returns `{stop, Result}': `Result' is then the answer. Nothing is copied:
%% it stops after the messages it needed.
-spec fold(fun((message(), Acc) -> Acc | {stop, Result}), Acc, log()) -> Acc | {stop, Result}.
fold(Fun, Acc, L) ->
    fold_origins(Fun, Acc, maps:iterator(L)).

fold_origins(Fun, Acc, I) ->
    case maps:next(I) of
        none -> Acc;
        {_, {_, _, M, New}, I1} ->
            case fold_new(Fun, fold_seqs(Fun, Acc, maps:iterator(M)), New) of
                Stop = {stop, _} -> Stop;
                Acc1 -> fold_origins(Fun, Acc1, I1)
            end
    end.

fold_seqs(_, Stop = {stop, _}, _) -> Stop;
fold_seqs(Fun, Acc, I) ->
    case maps:next(I) of
        none -> Acc;
        {_, {Msg, _}, I1} -> fold_seqs(Fun, Fun(Msg, Acc), I1)
    end.

fold_new(_, Stop = {stop, _}, _) -> Stop;
fold_new(_, Acc, []) -> Acc;
fold_new(Fun, Acc, [{_, {Msg, _}} | Rest]) -> fold_new(Fun, Fun(Msg, Acc), Rest).

%% @doc How many operations are logged.
-spec count(log()) -> non_neg_integer().
count(L) ->
    maps:fold(fun(_, {_, _, M, New}, N) -> N + map_size(M) + length(New) end, 0, L).

%% @doc The origins with operations logged.
-spec origins(log()) -> [replica()].
origins(L) -> maps:keys(L).

%% @doc The highest sequence number logged of origin `O' (which must have operations
%% logged).
-spec highest(replica(), log()) -> pos_integer().
highest(O, L) ->
    {_, Hi, _, _} = maps:get(O, L),
    Hi.

%% @doc Per origin, the lowest and highest sequence numbers logged (`none' for an origin
%% with none, which the log does not keep: for inspection).
-spec ranges(log()) -> #{replica() => {pos_integer(), pos_integer()} | none}.
ranges(L) ->
    maps:map(fun(_, OL) ->
                     case [Seq || {Seq, _} <- entries(OL)] of
                         [] -> none;
                         Seqs -> {lists:min(Seqs), lists:max(Seqs)}
                     end
             end, L).
